// The admin endpoint (--admin-listen): HTTP/1.1 for operators and Prometheus.
//   GET /metrics  the Prometheus text exposition (common/metrics.h)
//   GET /healthz  200 "ok" while the daemon serves
//   GET /readyz   200 "ready" once every warmup and pull at start is done, else 503
//   GET /status   JSON: models served, pulls, warmups, stores (Daemon::StatusJson)
// It carries no token and no weights: bind it to loopback or a management
// network. Requests are bounded (4 KiB, 5 s) and served by 2 threads.
//
// Thread safety: the handlers are called from the server's threads.
#pragma once

#include <functional>
#include <memory>
#include <thread>

#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"

namespace httplib {
class Server;
}

namespace seedd {

class AdminServer {
 public:
  struct Handlers {
    std::function<bool()> ready;
    std::function<Json()> status;
  };
  // Binds `listen` (port 0: any free port) and serves until destroyed.
  static Result<std::unique_ptr<AdminServer>> Start(const HostPort& listen, Handlers handlers);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  const HostPort& address() const { return address_; }

 private:
  AdminServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  HostPort address_;
};

}  // namespace seedd
