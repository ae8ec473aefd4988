#include "transport/resolver_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>

#include "support/test_util.h"

namespace seedd {
namespace {

using std::chrono::milliseconds;

// Blocks the tasks that call Wait() until Open().
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(ResolverPool, RunsEveryTaskAndDrainsTheQueueOnShutdown) {
  std::atomic<int> ran{0};
  {
    ResolverPool pool(2, 4);
    for (int i = 0; i < 1000; ++i) pool.Submit([&] { ++ran; });
    pool.Shutdown();
    EXPECT_EQ(ran, 1000);
    pool.Submit([&] { ++ran; });  // dropped after shutdown
  }
  EXPECT_EQ(ran, 1000);
}

TEST(ResolverPool, GrowsWhileEveryThreadIsHeldBySlowTasks) {
  ResolverPool pool(2, 16, milliseconds(2));
  Gate gate;
  for (int i = 0; i < 6; ++i) pool.Submit([&] { gate.Wait(); });
  // Six slow tasks all run at once although only two threads were warm.
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 6; }));
  std::atomic<bool> fast{false};
  pool.Submit([&] { fast = true; });
  EXPECT_TRUE(testing::WaitUntil([&] { return fast.load(); }));
  EXPECT_GE(pool.threads(), 7u);
  gate.Open();
}

TEST(ResolverPool, NeverExceedsItsMaximum) {
  ResolverPool pool(1, 3, milliseconds(1));
  Gate gate;
  for (int i = 0; i < 10; ++i) pool.Submit([&] { gate.Wait(); });
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 3; }));
  EXPECT_EQ(pool.threads(), 3u);
  gate.Open();
  pool.Shutdown();
  EXPECT_EQ(gate.waiting(), 10);
}

TEST(ResolverPool, ShortTasksDoNotGrowThePool) {
  ResolverPool pool(2, 64, milliseconds(200));
  std::atomic<int> ran{0};
  for (int i = 0; i < 20000; ++i) pool.Submit([&] { ++ran; });
  EXPECT_TRUE(testing::WaitUntil([&] { return ran == 20000; }));
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(ResolverPool, ExtraThreadsExitWhenIdle) {
  ResolverPool pool(1, 8, milliseconds(1), milliseconds(50));
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.Submit([&] { gate.Wait(); });
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 4; }));
  gate.Open();
  EXPECT_TRUE(testing::WaitUntil([&] { return pool.threads() == 1; }));
  std::atomic<bool> ran{false};
  pool.Submit([&] { ran = true; });  // joins the exited threads, still runs
  EXPECT_TRUE(testing::WaitUntil([&] { return ran.load(); }));
}

}  // namespace
}  // namespace seedd
