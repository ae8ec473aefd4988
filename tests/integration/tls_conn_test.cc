// Conn's deadlines over TLS hold for the whole call: a peer that sends a TLS
// record a byte at a time (each byte in time for a deadline per read) is cut at
// the deadline, and so is a handshake whose peer never finishes it.
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/unique_fd.h"
#include "seedd/tls.h"
#include "support/test_util.h"
#include "transport/tls.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class TlsConnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(testing::MakeTestPki(dir_.path(), &error)) << error;
    TlsOptions server;
    server.cert = dir_.path() / "server.crt";
    server.key = dir_.path() / "server.key";
    server_ = *TlsContext::Create(server);
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    server_fd_ = UniqueFd(fds[0]);
    client_fd_ = UniqueFd(fds[1]);
  }

  // A TLS client on client_fd_ whose records are written by the test: the
  // handshake goes out whole, then `send` writes each record as the test likes.
  struct ManualClient {
    SSL_CTX* ctx = nullptr;
    SSL* ssl = nullptr;
    BIO* in = nullptr;   // what the server sent, fed by the test
    BIO* out = nullptr;  // what the client would send, held for the test
    ~ManualClient() {
      if (ssl != nullptr) SSL_free(ssl);
      if (ctx != nullptr) SSL_CTX_free(ctx);
    }
    // The bytes the client has produced so far.
    std::string Take() {
      std::string bytes;
      char buf[4096];
      int n;
      while ((n = BIO_read(out, buf, sizeof(buf))) > 0) bytes.append(buf, static_cast<size_t>(n));
      return bytes;
    }
  };
  void Handshake(ManualClient* c) {
    c->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, nullptr);
    c->ssl = SSL_new(c->ctx);
    c->in = BIO_new(BIO_s_mem());
    c->out = BIO_new(BIO_s_mem());
    SSL_set_bio(c->ssl, c->in, c->out);
    for (;;) {
      const int r = SSL_connect(c->ssl);
      testing::SendAll(client_fd_.get(), c->Take());
      if (r == 1) break;
      ASSERT_EQ(SSL_get_error(c->ssl, r), SSL_ERROR_WANT_READ) << SslErrors();
      char buf[4096];
      const ssize_t n = ::recv(client_fd_.get(), buf, sizeof(buf), 0);
      ASSERT_GT(n, 0) << "the server closed during the handshake";
      BIO_write(c->in, buf, static_cast<int>(n));
    }
  }

  // A server Conn on server_fd_ with `client` done with its handshake.
  std::unique_ptr<Conn> Established(ManualClient* client) {
    Result<std::unique_ptr<Conn>> conn = Status::Unavailable("not yet");
    std::thread accept([&] {
      conn = Conn::Accept(server_fd_.get(), *server_, Clock::now() + std::chrono::seconds(10));
    });
    Handshake(client);
    accept.join();
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(*conn) : nullptr;
  }

  testing::TempDir dir_;
  std::shared_ptr<TlsContext> server_;
  UniqueFd server_fd_;
  UniqueFd client_fd_;
};

TEST_F(TlsConnTest, ARecordTrickledAByteAtATimeIsCutAtTheReadDeadline) {
  ManualClient client;
  std::unique_ptr<Conn> conn = Established(&client);
  ASSERT_NE(conn, nullptr);
  // One record of 100 bytes, sent a byte every 50 ms (5 s in all).
  ASSERT_EQ(SSL_write(client.ssl, std::string(100, 'x').data(), 100), 100);
  const std::string record = client.Take();
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (size_t i = 0; i < record.size() && !stop; ++i) {
      testing::SendAll(client_fd_.get(), record.substr(i, 1));
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  char buf[100];
  const auto start = Clock::now();
  Status got = conn->RecvAllBy(buf, sizeof(buf), start + milliseconds(1000));
  const auto took = Clock::now() - start;
  stop = true;
  trickle.join();
  EXPECT_EQ(got.code(), StatusCode::kDeadlineExceeded) << got.ToString();
  EXPECT_LT(took, milliseconds(1500));
}

// A peer that reads, but a few hundred bytes at a time: each write() makes some
// progress, so a timeout per system call never fires; the send's deadline is
// for the whole call.
TEST_F(TlsConnTest, ASendToASlowReaderEndsAtItsDeadline) {
  ManualClient client;
  std::unique_ptr<Conn> conn = Established(&client);
  ASSERT_NE(conn, nullptr);
  int small = 4096;
  ::setsockopt(server_fd_.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ::setsockopt(client_fd_.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    char buf[300];
    while (!stop) {
      if (::recv(client_fd_.get(), buf, sizeof(buf), MSG_DONTWAIT) == 0) return;
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const std::string data(4 << 20, 'd');  // ~15 KB/s: minutes to send whole
  const auto start = Clock::now();
  const bool sent = conn->SendAllBy(data.data(), data.size(), start + milliseconds(1000));
  const auto took = Clock::now() - start;
  stop = true;
  reader.join();
  EXPECT_FALSE(sent);
  EXPECT_LT(took, milliseconds(1500));
}

// OpenSSL's error queue is per thread, and a stream thread serves connection
// after connection: an error an earlier connection left there (a peer gone
// mid-record) must not turn this connection's ordinary wait for data into a
// failure. Before, a pull over TLS lost healthy data connections this way.
TEST_F(TlsConnTest, AnErrorLeftOnTheThreadByAnotherConnectionDoesNotFailThisOne) {
  ManualClient client;
  std::unique_ptr<Conn> conn = Established(&client);
  ASSERT_NE(conn, nullptr);
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(100));  // the read below has to wait
    ASSERT_EQ(SSL_write(client.ssl, "request!", 8), 8);
    testing::SendAll(client_fd_.get(), client.Take());
  });
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);  // another connection's
  char buf[8];
  Status got = conn->RecvAllBy(buf, sizeof(buf), Clock::now() + milliseconds(5000));
  late.join();
  ASSERT_TRUE(got.ok()) << got.ToString();
  EXPECT_EQ(std::string(buf, 8), "request!");
  // A send, and a read of what is not there yet, alike.
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  EXPECT_TRUE(conn->SendAllBy("answer", 6, Clock::now() + milliseconds(5000)));
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  EXPECT_EQ(conn->RecvSome(buf, sizeof(buf), milliseconds(100)), 0);
}

TEST_F(TlsConnTest, AHandshakeTrickledAByteAtATimeIsCutAtItsDeadline) {
  // A ClientHello record header, then a byte every 50 ms of a 1,000-byte body.
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    testing::SendAll(client_fd_.get(), std::string("\x16\x03\x01\x03\xe8", 5));
    for (int i = 0; i < 1000 && !stop; ++i) {
      testing::SendAll(client_fd_.get(), std::string(1, '\x01'));
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  const auto start = Clock::now();
  auto conn = Conn::Accept(server_fd_.get(), *server_, start + milliseconds(1000));
  const auto took = Clock::now() - start;
  stop = true;
  trickle.join();
  EXPECT_FALSE(conn.ok());
  EXPECT_LT(took, milliseconds(1500));
}

}  // namespace
}  // namespace seedd
