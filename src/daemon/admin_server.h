// The admin endpoint (--admin-listen): HTTP/1.1 for operators, probes and
// Prometheus.
//   GET /metrics  the Prometheus text exposition (common/metrics.h)
//   GET /healthz  200 "ok" while the daemon serves
//   GET /readyz   200 "ready" once every warmup and pull at start is done, else 503
//   GET /status   JSON: models served, pulls, warmups, stores (Daemon::StatusJson)
// It carries no token and no weights. Kubernetes probes reach the pod's
// address, so it is built to face a network: GET and HEAD only; a request that
// announces a body (Content-Length other than 0, or Transfer-Encoding) is
// refused before any of the body is read; the request head is at most
// kMaxRequestBytes and must arrive whole within kRequestDeadline of the accept
// (a deadline for the whole request, not per read); one answer per connection.
// Every connection waits on one thread's event loop, so connections that send
// slowly hold no thread: at most kMaxConnections are open, and a newcomer past
// that takes the place of the oldest.
//
// Thread safety: the handlers are called from the endpoint's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"

namespace seedd {

class AdminServer {
 public:
  static constexpr size_t kMaxRequestBytes = 8 * 1024;
  static constexpr std::chrono::seconds kRequestDeadline{5};
  static constexpr size_t kMaxConnections = 128;

  struct Handlers {
    std::function<bool()> ready;
    std::function<Json()> status;
  };
  // Binds `listen` (port 0: any free port) and serves until destroyed.
  static Result<std::unique_ptr<AdminServer>> Start(const HostPort& listen, Handlers handlers);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  const HostPort& address() const;

  struct Rep;

 private:
  AdminServer() = default;
  std::unique_ptr<Rep> rep_;
};

}  // namespace seedd
