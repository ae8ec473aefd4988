// The least any control-channel server can do per request here, the baseline
// of bench/run.sh: two threads, each with its own listening socket on one port
// (SO_REUSEPORT), each accepting a connection, reading one frame (8-byte
// big-endian length, then the body), writing a fixed response and closing. No
// authentication, no JSON, no deadlines: written in plain POSIX calls.
//
//   minimal_server HOST:PORT RESPONSE_FILE   (prints "minimal: serving on HOST:PORT")
// RESPONSE_FILE holds the response's JSON body (the frame header is added).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int Listen(const char* host, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 1024) != 0) {
    std::perror("minimal: listen");
    std::exit(1);
  }
  return fd;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void Serve(int listener, const std::string* response) {
  thread_local char body[64 * 1024];
  for (;;) {
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    unsigned char head[8];
    if (ReadAll(c, reinterpret_cast<char*>(head), 8)) {
      uint64_t n = 0;
      for (unsigned char b : head) n = n << 8 | b;
      if (n <= sizeof(body) && ReadAll(c, body, n)) {
        (void)!::write(c, response->data(), response->size());
      }
    }
    ::close(c);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: minimal_server HOST:PORT RESPONSE_FILE\n");
    return 2;
  }
  std::string addr = argv[1];
  const size_t colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon);
  uint16_t port = static_cast<uint16_t>(std::atoi(addr.c_str() + colon + 1));
  FILE* f = std::fopen(argv[2], "rb");
  if (f == nullptr) {
    std::perror("minimal: response file");
    return 1;
  }
  std::string json;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) json.append(buf, n);
  std::fclose(f);
  std::string response(8, '\0');
  for (int i = 0; i < 8; ++i) {
    response[i] = static_cast<char>((static_cast<uint64_t>(json.size()) >> (56 - 8 * i)) & 0xff);
  }
  response += json;
  const int first = Listen(host.c_str(), port);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(first, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.sin_port);
  const int second = Listen(host.c_str(), port);
  std::printf("minimal: serving on %s:%u\n", host.c_str(), port);
  std::fflush(stdout);
  std::thread other(Serve, second, &response);
  Serve(first, &response);
  other.join();
}
