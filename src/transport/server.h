// SeedServer: the listener of a SeedTransport. One event-loop thread accepts and
// owns every socket that is reading or writing; Resolve runs on a resolver pool
// so a slow one never delays other peers. A request whole at accept is answered
// at once when its seedable can without blocking (Seedable::ResolveTextNow: a
// small artifact in the page cache), else goes to the pool with its socket,
// unregistered; either returns to the loop only when its response does not fit
// the socket buffer. On a plain listener a second thread accepts beside the loop
// and does the same, posting anything else (refusals, partial requests) to the
// loop, so that two cores answer small requests together. Each connection has
// a whole-frame deadline before authentication and a longer one after; the
// number of open connections is capped.
//
// Thread safety: Start and Close may be called from any thread (not concurrently
// with each other); open_connections is thread-safe.
#pragma once

#include <memory>

#include "seedd/seed_config.h"
#include "seedd/seed_transport.h"
#include "seedd/status.h"
#include "transport/handler.h"

namespace seedd {

class Connection;
class ControlExchange;

class SeedServer {
 public:
  // REQUIRES: handler outlives the server.
  SeedServer(const RequestHandler& handler, const TransportOptions& options);
  SeedServer(const SeedServer&) = delete;
  SeedServer& operator=(const SeedServer&) = delete;
  ~SeedServer();

  // Binds and starts serving; returns the bound address.
  Result<HostPort> Start(const HostPort& listen);
  // Stops accepting, closes idle connections, waits for in-flight ones. Idempotent.
  void Close();
  size_t open_connections() const;

 private:
  friend class Connection;
  friend class ControlExchange;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace seedd
