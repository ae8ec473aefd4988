// RecvAllBy over a real loopback TCP connection: a large read wakes its thread
// about once, not at every segment that arrives; a read begun with part of its
// bytes already queued ends when the rest arrives, not at its deadline; a small
// read after a large one is not held; the deadline holds for the whole read,
// against silence and against a byte at a time.
#include "transport/socket_io.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "support/test_util.h"

namespace seedd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The calling thread's voluntary context switches so far (each a wait that
// ended in a wakeup).
long VoluntarySwitches() {
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  const std::string key = "voluntary_ctxt_switches:";
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  }
  return -1;
}

class SocketIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uint16_t port = 0;
    UniqueFd listener = testing::ListenLoopback(&port);
    ASSERT_TRUE(listener.valid());
    sender_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    ASSERT_EQ(::connect(sender_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    receiver_ = UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(receiver_.valid());
  }

  // A receive buffer of 1 MiB, as a data connection's grows to once it has
  // carried a few chunks (a fresh one's 128 KiB allows a mark of 32 KiB).
  void LargeReceiveBuffer() {
    const int bytes = 1 << 20;
    ASSERT_EQ(::setsockopt(receiver_.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)), 0);
  }

  void Send(size_t n) {
    const std::string bytes(n, 'x');
    ASSERT_TRUE(SendAll(sender_.get(), bytes.data(), bytes.size()));
  }

  UniqueFd sender_;
  UniqueFd receiver_;
};

TEST_F(SocketIoTest, ALargeReadWakesItsThreadOnceItsBytesAreInNotAtEverySegment) {
  constexpr size_t kPiece = 256 * 1024;
  constexpr int kSends = 32;  // 8 KiB each, 2 ms apart
  LargeReceiveBuffer();
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(20));  // the read waits from the start
    for (int i = 0; i < kSends; ++i) {
      Send(kPiece / kSends);
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  std::string buf(kPiece, '\0');
  const long before = VoluntarySwitches();
  const Status got =
      RecvAllBy(receiver_.get(), buf.data(), buf.size(), Clock::now() + milliseconds(10000));
  const long woken = VoluntarySwitches() - before;
  sender.join();
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(buf, std::string(kPiece, 'x'));
  // With the kernel's default low-water mark (one byte) the reader wakes at
  // each of the 32 sends.
  EXPECT_LE(woken, 4) << "the reader woke " << woken << " times for " << kSends << " sends";
}

TEST_F(SocketIoTest, AReadBegunWithPartOfItsBytesQueuedEndsWhenTheRestArrives) {
  constexpr size_t kPiece = 256 * 1024;
  Send(100 * 1024);
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(100));
    Send(kPiece - 100 * 1024);  // exactly the rest, then nothing more
  });
  std::string buf(kPiece, '\0');
  const auto start = Clock::now();
  const Status got =
      RecvAllBy(receiver_.get(), buf.data(), buf.size(), start + milliseconds(20000));
  const auto took = Clock::now() - start;
  sender.join();
  ASSERT_TRUE(got.ok()) << got.message();
  // Not held to its deadline (20 s) waiting for more bytes than are due.
  EXPECT_LT(took, milliseconds(10000));
}

TEST_F(SocketIoTest, ASmallReadAfterALargeOneIsNotHeldByItsMark) {
  constexpr size_t kPiece = 256 * 1024;
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(20));
    Send(kPiece);
    std::this_thread::sleep_for(milliseconds(100));
    Send(16);  // a header's worth, and nothing after it
  });
  std::string buf(kPiece, '\0');
  ASSERT_TRUE(
      RecvAllBy(receiver_.get(), buf.data(), buf.size(), Clock::now() + milliseconds(10000)).ok());
  char header[16];
  const auto start = Clock::now();
  const Status got =
      RecvAllBy(receiver_.get(), header, sizeof(header), start + milliseconds(20000));
  const auto took = Clock::now() - start;
  sender.join();
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_LT(took, milliseconds(10000));
}

TEST_F(SocketIoTest, AReadWhoseBytesDoNotComeEndsAtItsDeadlineSayingHowManyAreMissing) {
  Send(1000);
  std::string buf(64 * 1024, '\0');
  const auto start = Clock::now();
  const Status got = RecvAllBy(receiver_.get(), buf.data(), buf.size(), start + milliseconds(300));
  const auto took = Clock::now() - start;
  EXPECT_EQ(got.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.message().find(std::to_string(64 * 1024 - 1000) + " bytes still missing"),
            std::string::npos)
      << got.message();
  EXPECT_GE(took, milliseconds(300));
}

TEST_F(SocketIoTest, APeerSendingAByteAtATimeIsCutAtTheReadsDeadline) {
  // Each byte arrives well within any per-wait timeout; the deadline holds for
  // the whole read.
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    while (!stop.load()) {
      Send(1);
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  std::string buf(64 * 1024, '\0');
  const auto start = Clock::now();
  const Status got = RecvAllBy(receiver_.get(), buf.data(), buf.size(), start + milliseconds(400));
  const auto took = Clock::now() - start;
  stop = true;
  sender.join();
  EXPECT_EQ(got.code(), StatusCode::kDeadlineExceeded) << got.message();
  EXPECT_LT(took, milliseconds(5000));
}

TEST_F(SocketIoTest, AReadWhosePeerClosesMidwaySaysSo) {
  Send(1000);
  sender_.Reset();
  std::string buf(64 * 1024, '\0');
  const Status got =
      RecvAllBy(receiver_.get(), buf.data(), buf.size(), Clock::now() + milliseconds(10000));
  EXPECT_EQ(got.code(), StatusCode::kUnavailable);
  EXPECT_NE(got.message().find("closed"), std::string::npos) << got.message();
}

}  // namespace
}  // namespace seedd
