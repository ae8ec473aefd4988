// SeedTransport: the daemon's D2D seeding endpoint. It serves seedables to peers
// (listener) and fetches them from a source daemon (Request, Adopt).
//
// Thread safety: all public methods are thread-safe. The listener runs its own
// event-loop thread plus a pool of resolver threads; Close (or the destructor)
// stops them and returns only once none is left.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/seedable.h"
#include "seedd/status.h"
#include "seedd/tokens.h"

namespace seedd {

// Protocol limits (SPEC §2).
inline constexpr size_t kMaxRemoteRequestBytes = 64 * 1024;
inline constexpr size_t kMaxResponseBytes = 64 * 1024 * 1024;
inline constexpr std::chrono::milliseconds kRemoteRequestTimeout{5000};
inline constexpr std::chrono::milliseconds kAuthenticatedTimeout{300000};

// Takes over an authenticated connection whose request names its kind (a data
// plane): it gets the connection (a blocking socket, plain or TLS; closed after
// it returns) and
// the request, and runs on a stream thread of its own.
class Conn;        // a connection, plain or TLS (transport/tls.h)
class TlsContext;  // seedd/tls.h
using StreamHandler = std::function<void(Conn& conn, const Json& request)>;

struct TransportOptions {
  // Server: the request frame must arrive whole within this time.
  std::chrono::milliseconds request_timeout = kRemoteRequestTimeout;
  // Server: deadline for resolving and writing once authenticated.
  std::chrono::milliseconds authenticated_timeout = kAuthenticatedTimeout;
  // Server: connections beyond this are closed at once, with a log line.
  size_t max_connections = 1024;
  // Server: threads running Resolve, off the event loop. The pool keeps
  // min_resolver_threads warm and grows, while every thread is busy, up to
  // max_resolver_threads (each slow Resolve holds one).
  size_t min_resolver_threads = 2;
  size_t max_resolver_threads = 64;
  // Server: kinds whose connections are handed to a StreamHandler after
  // authentication, and the most such connections served at once.
  std::map<std::string, StreamHandler> stream_handlers;
  size_t max_streams = 256;
  // Server: data connections waiting for a stream thread beyond this are refused
  // with an error ("the data plane is busy").
  size_t max_queued_streams = 64;
  // TLS 1.3. With a server certificate the listener speaks TLS only (a plain
  // client is answered, in plain, that it must use TLS); with a CA the requests
  // this transport sends use TLS, the source verified against it. Null: plain.
  std::shared_ptr<TlsContext> tls;
  // Server: what one peer host (an IPv4 address, an IPv6 /64) may hold:
  // connections that have not authenticated yet, and data connections. 0 for
  // max_unauthenticated: three quarters of max_connections, the rest kept for
  // authenticated work.
  size_t max_unauthenticated_per_address = 64;
  size_t max_unauthenticated = 0;
  size_t max_streams_per_address = 32;
  // Server: an address with more failed authentications than this within
  // auth_failure_window has its connections refused until the window ends.
  size_t max_auth_failures = 20;
  std::chrono::milliseconds auth_failure_window{10000};
  // The tokens accepted (any) and sent (the first), read at each request so
  // that they may be replaced while running (a rotation); unset: the config's
  // token alone.
  std::shared_ptr<const TokenRing> tokens;
  // Client: connect timeout, and the deadline for the whole response.
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds response_timeout = kAuthenticatedTimeout;
  // Client: set to stop; a request in flight (connecting, sending, or waiting
  // for its response, plain or TLS) returns within about 50 ms of it.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

// What Adopt did; each outcome has logged its SPEC §2 line.
enum class AdoptOutcome {
  kNoResponse,  // no source, transport failure, or a malformed response
  kMiss,        // the source answered "miss"
  kNotOk,       // the source answered another non-"ok" status ("error", ...)
  kRejected,    // ValidatePayload or Install failed
  kAdopted,
};

// The message of an error response, printable and at most 300 bytes, with what
// to do for the usual causes (a wrong token, a kind the source does not serve);
// "no message" when it has none.
std::string ExplainSourceError(const Json& response);

class SeedTransport {
 public:
  // REQUIRES: seedables have distinct kinds.
  static Result<std::unique_ptr<SeedTransport>> Create(std::vector<SeedablePtr> seedables,
                                                       SeedConfig config,
                                                       TransportOptions options = {});
  SeedTransport(const SeedTransport&) = delete;
  SeedTransport& operator=(const SeedTransport&) = delete;
  ~SeedTransport();

  // Starts serving this daemon's seedables. Binds IPv6 when the host has ':';
  // port 0 picks a free port. Returns the bound address, or nullopt when no
  // listener is configured.
  Result<std::optional<HostPort>> StartListener();
  // With TLS: also serves on `listen` in plain TCP, for peers that cannot speak
  // TLS (the reference implementation); its limits are counted apart.
  Result<HostPort> StartPlainListener(const HostPort& listen);

  // Sends {...payload, "token": token} to the source and reads one response.
  // Returns nullopt (with a warning) when there is no source, on any transport
  // failure, or when the response is not a JSON object.
  std::optional<Json> Request(const Json& payload) const;

  // Best-effort: fetch and install `seedable`'s state for `ctx` from the source.
  // `why`, when given, receives the source's message for kNotOk (with a hint for
  // the usual causes) and the reason for kRejected.
  AdoptOutcome Adopt(Seedable& seedable, const Json& ctx, std::string* why = nullptr) const;

  // Source side: answer one authenticated request (dispatch by kind).
  Json HandleRequest(const Json& request) const;

  // Stops the listener: no new connections; idle connections are closed;
  // in-flight requests finish or hit their deadline. Idempotent.
  void Close();

  // Connections the listener holds open now (for tests and metrics).
  size_t open_connections() const;

 private:
  struct Rep;
  explicit SeedTransport(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace seedd
