#include "transport/resolver_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <thread>

#include "support/test_util.h"

namespace seedd {
namespace {

using std::chrono::milliseconds;

// Blocks the tasks that call Wait() until Open(). Declared before the pool:
// the pool's threads may still be leaving Wait() until the pool is destroyed.
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
  Gate gate;
  ResolverPool pool(2, 16, milliseconds(2));
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
  Gate gate;
  ResolverPool pool(1, 3, milliseconds(1));
  for (int i = 0; i < 10; ++i) pool.Submit([&] { gate.Wait(); });
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 3; }));
  EXPECT_EQ(pool.threads(), 3u);
  gate.Open();
  pool.Shutdown();
  EXPECT_EQ(gate.waiting(), 10);
}

// A pool at its maximum with tasks waiting idles until a thread is free: its
// supervisor spun a core for as long as the pool stayed full (a stream pool
// held by slow peers).
TEST(ResolverPool, AFullPoolWithTasksWaitingDoesNotSpin) {
  Gate gate;
  ResolverPool pool(1, 2, milliseconds(5));
  for (int i = 0; i < 3; ++i) pool.Submit([&] { gate.Wait(); });
  ASSERT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 2; }));
  ASSERT_EQ(pool.queued(), 1u);
  auto cpu = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;  // ms
  };
  const double before = cpu();
  std::this_thread::sleep_for(milliseconds(500));
  // Spinning, the process spends about the 500 ms; idle, about nothing.
  EXPECT_LT(cpu() - before, 100.0);
  gate.Open();
  pool.Shutdown();
  EXPECT_EQ(gate.waiting(), 3);
}

// With no stall time, each task that finds no thread free gets one before
// Submit returns: a burst of tasks that hold their threads (data connections)
// all run at once, none waiting for the pool to grow.
TEST(ResolverPool, WithNoStallTimeATaskThatFindsNoThreadFreeStartsOneAtOnce) {
  Gate gate;
  ResolverPool pool(1, 64, milliseconds(0));
  for (size_t i = 1; i <= 32; ++i) {
    pool.Submit([&] { gate.Wait(); });
    EXPECT_GE(pool.threads(), i);
    EXPECT_EQ(pool.unserved(), 0u);
  }
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 32; }));
  EXPECT_EQ(pool.threads(), 32u);
  gate.Open();
}

// At its maximum, such a pool holds the tasks beyond it until a thread is free,
// and counts them as unserved (what a server refuses connections by).
TEST(ResolverPool, WithNoStallTimeTasksBeyondTheMaximumWaitAndCountAsUnserved) {
  Gate gate;
  ResolverPool pool(1, 3, milliseconds(0));
  for (int i = 0; i < 5; ++i) pool.Submit([&] { gate.Wait(); });
  EXPECT_EQ(pool.threads(), 3u);
  EXPECT_EQ(pool.unserved(), 2u);
  EXPECT_TRUE(testing::WaitUntil([&] { return gate.waiting() == 3; }));
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_EQ(pool.unserved(), 2u);
  gate.Open();
  pool.Shutdown();
  EXPECT_EQ(gate.waiting(), 5);
}

TEST(ResolverPool, ShortTasksDoNotGrowThePool) {
  ResolverPool pool(2, 64, milliseconds(200));
  std::atomic<int> ran{0};
  for (int i = 0; i < 20000; ++i) pool.Submit([&] { ++ran; });
  EXPECT_TRUE(testing::WaitUntil([&] { return ran == 20000; }));
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(ResolverPool, ExtraThreadsExitWhenIdle) {
  Gate gate;
  ResolverPool pool(1, 8, milliseconds(1), milliseconds(50));
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
