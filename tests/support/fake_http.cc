#include "support/fake_http.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

#include "support/test_util.h"

namespace seedd::testing {

FakeHttpServer::FakeHttpServer(std::vector<std::string> responses)
    : responses_(std::move(responses)) {
  listener_ = ListenLoopback(&port_);
  thread_ = std::thread([this] { Serve(); });
}

FakeHttpServer::~FakeHttpServer() {
  stop_ = true;
  thread_.join();
}

std::string FakeHttpServer::Response(int status, const std::string& reason,
                                     const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/xml\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

void FakeHttpServer::Serve() {
  while (!stop_) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    UniqueFd c(::accept(listener_.get(), nullptr, nullptr));
    if (!c.valid()) continue;
    // Read the head, then Content-Length bytes of body.
    std::string in;
    char buf[65536];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      ssize_t n = ::recv(c.get(), buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      size_t head = in.find("\r\n\r\n");
      if (need == std::string::npos && head != std::string::npos) {
        size_t body = 0;
        size_t cl = in.find("ontent-Length:");
        if (cl == std::string::npos) cl = in.find("ontent-length:");
        if (cl != std::string::npos && cl < head)
          body = std::strtoul(in.c_str() + cl + 14, nullptr, 10);
        need = head + 4 + body;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(in.substr(0, in.find("\r\n")));
    }
    int i = requests_++;
    const std::string& r = responses_[std::min<size_t>(i, responses_.size() - 1)];
    ::send(c.get(), r.data(), r.size(), MSG_NOSIGNAL);
  }
}

}  // namespace seedd::testing
