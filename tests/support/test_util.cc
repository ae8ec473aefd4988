#include "support/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "common/crypto.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "support/process.h"
#include "transport/client.h"
#include "wire/frame.h"

namespace seedd::testing {

TempDir::TempDir() {
  path_ = std::filesystem::temp_directory_path() / ("seedd-test-" + RandomHexOrDie(8));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

class LogCapture::Sink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<LogLine> Lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.push_back({msg.level, std::string(msg.payload.data(), msg.payload.size())});
  }
  void flush_() override {}

 private:
  std::vector<LogLine> lines_;
};

LogCapture::LogCapture() : sink_(std::make_shared<Sink>()) {
  old_level_ = Logger().level();
  Logger().set_level(spdlog::level::trace);
  AddLogSink(sink_);
}

LogCapture::~LogCapture() {
  RemoveLogSink(sink_);
  Logger().set_level(old_level_);
}

std::vector<LogLine> LogCapture::lines() const { return sink_->Lines(); }

bool LogCapture::Contains(spdlog::level::level_enum level, const std::string& text) const {
  for (const auto& line : lines()) {
    if (line.level == level && line.text.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string LogCapture::Dump() const {
  std::string out;
  for (const auto& line : lines()) {
    out += std::string(spdlog::level::to_string_view(line.level).data()) + ": " + line.text + "\n";
  }
  return out;
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

namespace {

// A loopback socket on a free port, listening (with `backlog`) or not (-1).
UniqueFd BindLoopback(uint16_t* port, int backlog) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      (backlog >= 0 && ::listen(fd.get(), backlog) != 0) ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return UniqueFd();
  }
  *port = ntohs(a.sin_port);
  return fd;
}

}  // namespace

UniqueFd ListenLoopback(uint16_t* port) { return BindLoopback(port, 16); }

UniqueFd RefusingPort(uint16_t* port) { return BindLoopback(port, -1); }

DeafPort::DeafPort() {
  uint16_t port = 0;
  listener_ = BindLoopback(&port, 0);
  if (!listener_.valid()) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  // Connections until one is not answered: the queue is full from then on.
  for (int i = 0; i < 8; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
    pollfd p{fd.get(), POLLOUT, 0};
    const bool answered = ::poll(&p, 1, 200) == 1;
    queued_.push_back(std::move(fd));
    if (!answered) {
      port_ = port;
      return;
    }
  }
}

UniqueFd ConnectRaw(const HostPort& peer) {
  Result<UniqueFd> fd = ConnectTcp(peer, std::chrono::seconds(5));
  if (!fd.ok()) return UniqueFd();
  // ConnectTcp leaves the socket non-blocking; the tests want blocking reads.
  int flags = fcntl(fd->get(), F_GETFL);
  fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK);
  return std::move(*fd);
}

UniqueFd ConnectFrom(const std::string& source, const HostPort& peer, int receive_buffer) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (receive_buffer > 0) {
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(peer.port);
  ::inet_pton(AF_INET, peer.host.c_str(), &to.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return UniqueFd();
  }
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string ReadToEof(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

Json ReadResponse(int fd, std::chrono::milliseconds wait) {
  Result<std::string> body = ReadFrameBody(fd, 64 << 20, std::chrono::steady_clock::now() + wait);
  if (!body.ok()) return Json();
  Result<Json> value = ParseJson(*body);
  return value.ok() ? *value : Json();
}

std::string Header(uint64_t n) {
  std::string h(8, '\0');
  for (int i = 7; i >= 0; --i) {
    h[i] = static_cast<char>(n & 0xff);
    n >>= 8;
  }
  return h;
}

void HoldIdleConnections(const std::string& source, const HostPort& peer, size_t count,
                         const std::atomic<bool>& stop) {
  std::vector<UniqueFd> held;
  while (!stop) {
    held.erase(std::remove_if(held.begin(), held.end(),
                              [](const UniqueFd& fd) {
                                char b;
                                return ::recv(fd.get(), &b, 1, MSG_DONTWAIT) == 0;
                              }),
               held.end());
    while (held.size() < count && !stop) {
      UniqueFd fd = ConnectFrom(source, peer);
      if (!fd.valid()) break;
      held.push_back(std::move(fd));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool MakeTestPki(const std::filesystem::path& dir, std::string* error) {
  std::filesystem::create_directories(dir);
  const std::string script = "set -e; cd '" + dir.string() + R"(';
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
ca() { key "$1"; openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 30 -subj "/CN=$1" 2>/dev/null; }
cert() {  # cert NAME CA DAYS USAGE
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -out "$1.crt" \
    -days "$3" -extfile "$1.ext" 2>/dev/null
}
ca ca; ca other-ca
cert server ca 30 serverAuth
cert expired ca -1 serverAuth
cert stranger other-ca 30 serverAuth
cert client ca 30 clientAuth
)";
  RunResult made = RunCommand({"/bin/sh", "-c", script});
  if (made.status != 0) *error = made.err;
  return made.status == 0;
}

bool MakeSigningKeys(const std::filesystem::path& dir, const std::vector<std::string>& names,
                     std::string* error) {
  std::filesystem::create_directories(dir);
  std::string script = "set -e; cd '" + dir.string() + "'\n";
  for (const std::string& n : names) {
    script += "openssl genpkey -algorithm ed25519 -out '" + n + ".pem' 2>/dev/null\n";
    script += "openssl pkey -in '" + n + ".pem' -pubout -out '" + n + ".pub.pem' 2>/dev/null\n";
  }
  RunResult made = RunCommand({"/bin/sh", "-c", script});
  if (made.status != 0) *error = made.err;
  return made.status == 0;
}

}  // namespace seedd::testing
