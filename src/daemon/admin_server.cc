#include "daemon/admin_server.h"

#include <array>
#include <asio.hpp>
#include <cctype>
#include <list>
#include <sstream>
#include <thread>

#include "common/metrics.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"

namespace seedd {

using asio::ip::tcp;

namespace {

// After the answer, what the client still sends is read and dropped for this
// long (at most kDrainBytes), so that a refusal reaches a client that is still
// sending a body before the close could reset the connection.
constexpr std::chrono::milliseconds kLinger{500};
constexpr size_t kDrainBytes = 1 << 20;

struct Answer {
  Answer(int c, std::string t, std::string b, std::string h = "")
      : code(c), type(std::move(t)), body(std::move(b)), extra_headers(std::move(h)) {}
  int code;
  std::string type;
  std::string body;
  std::string extra_headers;  // each ending in \r\n
};

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

}  // namespace

struct AdminServer::Rep {
  struct Exchange {
    explicit Exchange(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::string head;
    std::string out;
    std::array<char, 2048> buf;
    size_t drained = 0;
    bool head_only = false;  // HEAD: the headers without the body
    std::list<std::shared_ptr<Exchange>>::iterator place;
  };
  using ExchangePtr = std::shared_ptr<Exchange>;

  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};  // after a failed accept (no descriptor left)
  std::thread thread;
  HostPort address;
  Handlers handlers;
  std::list<ExchangePtr> open;  // loop only; oldest first

  void Accept();
  void Read(const ExchangePtr& x);
  // The answer to a whole request head.
  Answer Route(const ExchangePtr& x);
  void Send(const ExchangePtr& x, const Answer& a);
  void Drain(const ExchangePtr& x);
  void End(const ExchangePtr& x);
};

void AdminServer::Rep::Accept() {
  auto x = std::make_shared<Exchange>(io);
  acceptor.async_accept(x->socket, [this, x](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      if (open.size() >= kMaxConnections) End(open.front());  // the oldest makes room
      x->place = open.insert(open.end(), x);
      x->timer.expires_after(kRequestDeadline);
      x->timer.async_wait([this, x](const asio::error_code& e) {
        if (!e) End(x);  // the whole request (or answer) was not done in time
      });
      Read(x);
      return Accept();
    }
    retry.expires_after(std::chrono::milliseconds(100));
    retry.async_wait([this](const asio::error_code& e) {
      if (!e) Accept();
    });
  });
}

void AdminServer::Rep::Read(const ExchangePtr& x) {
  x->socket.async_read_some(asio::buffer(x->buf), [this, x](const asio::error_code& ec, size_t n) {
    if (ec) return End(x);
    x->head.append(x->buf.data(), n);
    // A request line starts with a method in capitals: anything else (a seed
    // frame's length, sent here by mistake) is answered at once, not at the
    // request deadline, and the client can say what it reached.
    if (!x->head.empty() && (x->head[0] < 'A' || x->head[0] > 'Z')) {
      return Send(x, {400, "text/plain; charset=utf-8",
                      "this is a seedd admin endpoint (HTTP): the seed protocol is on the "
                      "daemon's --listen port\n"});
    }
    size_t end = x->head.find("\r\n\r\n");
    if (end == std::string::npos) end = x->head.find("\n\n");
    if (end == std::string::npos) {
      if (x->head.size() > kMaxRequestBytes) {
        return Send(x, {431, "text/plain; charset=utf-8",
                        "the request head is larger than " + std::to_string(kMaxRequestBytes) +
                            " bytes\n"});
      }
      return Read(x);
    }
    x->head.resize(end);
    Send(x, Route(x));
  });
}

Answer AdminServer::Rep::Route(const ExchangePtr& x) {
  std::istringstream in(x->head);
  std::string line;
  std::getline(in, line);
  std::istringstream request_line(Trim(line));
  std::string method, target, version;
  request_line >> method >> target >> version;
  if (method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0) {
    return {400, "text/plain; charset=utf-8", "not an HTTP/1.x request\n"};
  }
  for (std::string header; std::getline(in, header);) {
    const size_t colon = header.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(Trim(header.substr(0, colon)));
    const std::string value = Trim(header.substr(colon + 1));
    if (name == "transfer-encoding" || (name == "content-length" && value != "0")) {
      return {413, "text/plain; charset=utf-8", "this endpoint takes no request body\n"};
    }
  }
  if (method != "GET" && method != "HEAD") {
    return {405, "text/plain; charset=utf-8", "only GET and HEAD are served\n",
            "Allow: GET, HEAD\r\n"};
  }
  x->head_only = method == "HEAD";
  const std::string path = target.substr(0, target.find('?'));
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", metrics::Text()};
  }
  if (path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
  if (path == "/readyz") {
    const bool ready = handlers.ready();
    return {ready ? 200 : 503, "text/plain; charset=utf-8",
            ready ? "ready\n" : "starting: warmups or pulls at start are running\n"};
  }
  if (path == "/status") return {200, "application/json", DumpJson(handlers.status()) + "\n"};
  return {404, "text/plain; charset=utf-8",
          "not found: the paths are /metrics, /healthz, /readyz and /status\n"};
}

void AdminServer::Rep::Send(const ExchangePtr& x, const Answer& a) {
  x->out = "HTTP/1.1 " + std::to_string(a.code) + " " + Reason(a.code) +
           "\r\nContent-Type: " + a.type + "\r\nContent-Length: " + std::to_string(a.body.size()) +
           "\r\n" + a.extra_headers + "Connection: close\r\n\r\n";
  if (!x->head_only) x->out += a.body;
  asio::async_write(x->socket, asio::buffer(x->out), [this, x](const asio::error_code& ec, size_t) {
    if (ec) return End(x);
    asio::error_code ignored;
    x->socket.shutdown(tcp::socket::shutdown_send, ignored);
    x->timer.expires_after(kLinger);
    x->timer.async_wait([this, x](const asio::error_code& e) {
      if (!e) End(x);
    });
    Drain(x);
  });
}

void AdminServer::Rep::Drain(const ExchangePtr& x) {
  x->socket.async_read_some(asio::buffer(x->buf), [this, x](const asio::error_code& ec, size_t n) {
    x->drained += n;
    if (ec || x->drained > kDrainBytes) return End(x);
    Drain(x);
  });
}

void AdminServer::Rep::End(const ExchangePtr& x) {
  if (!x->socket.is_open()) return;
  asio::error_code ignored;
  x->socket.close(ignored);
  x->timer.cancel();
  open.erase(x->place);
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(const HostPort& listen, Handlers handlers) {
  auto admin = std::unique_ptr<AdminServer>(new AdminServer());
  admin->rep_ = std::make_unique<Rep>();
  Rep& rep = *admin->rep_;
  rep.handlers = std::move(handlers);
  asio::error_code ec;
  auto fail = [&](const std::string& why) {
    return Status::Unavailable("--admin-listen " + listen.ToString() + ": " + why);
  };
  asio::ip::address addr = asio::ip::make_address(listen.host, ec);
  if (ec) {  // a host name
    tcp::resolver resolver(rep.io);
    auto results = resolver.resolve(listen.host, std::to_string(listen.port), ec);
    if (ec || results.empty()) return fail("cannot resolve " + listen.host);
    addr = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(addr, listen.port);
  rep.acceptor.open(endpoint.protocol(), ec);
  if (!ec) rep.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) rep.acceptor.bind(endpoint, ec);
  if (!ec) rep.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("cannot bind (" + ec.message() + ": in use, or not an address of this host)");
  rep.address = HostPort{listen.host, rep.acceptor.local_endpoint().port()};
  rep.Accept();
  rep.thread = std::thread([&rep] { rep.io.run(); });
  Logger().info("Admin endpoint on http://{}/ (metrics, healthz, readyz, status)",
                rep.address.ToString());
  return admin;
}

const HostPort& AdminServer::address() const { return rep_->address; }

AdminServer::~AdminServer() {
  if (rep_ == nullptr) return;
  rep_->io.stop();
  if (rep_->thread.joinable()) rep_->thread.join();
}

}  // namespace seedd
