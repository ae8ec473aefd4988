#include "daemon/admin_server.h"

#include <httplib.h>

#include "common/metrics.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"

namespace seedd {

Result<std::unique_ptr<AdminServer>> AdminServer::Start(const HostPort& listen, Handlers handlers) {
  auto admin = std::unique_ptr<AdminServer>(new AdminServer());
  admin->server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *admin->server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.set_payload_max_length(4096);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_max_count(100);
  s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics::Text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/readyz", [ready = handlers.ready](const httplib::Request&, httplib::Response& res) {
    const bool is_ready = ready();
    res.status = is_ready ? 200 : 503;
    res.set_content(is_ready ? "ready\n" : "starting: warmups or pulls at start are running\n",
                    "text/plain");
  });
  s.Get("/status", [status = handlers.status](const httplib::Request&, httplib::Response& res) {
    res.set_content(DumpJson(status()) + "\n", "application/json");
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) {
      res.set_content("not found: the paths are /metrics, /healthz, /readyz and /status\n",
                      "text/plain");
    }
  });
  std::string host = listen.host;
  int port = listen.port;
  bool bound = false;
  if (port == 0) {
    port = s.bind_to_any_port(host);
    bound = port > 0;
  } else {
    bound = s.bind_to_port(host, port);
  }
  if (!bound) {
    return Status::Unavailable("--admin-listen " + listen.ToString() +
                               ": cannot bind (in use, or not an address of this host)");
  }
  admin->address_ = HostPort{listen.host, static_cast<uint16_t>(port)};
  admin->thread_ = std::thread([&s] { s.listen_after_bind(); });
  Logger().info("Admin endpoint on http://{}/ (metrics, healthz, readyz, status)",
                admin->address_.ToString());
  return admin;
}

AdminServer::~AdminServer() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace seedd
