// The server's private parts, shared by server.cc (the listeners, the loop and
// the answers), server_accept.cc (accepting, on the loop and beside it),
// server_connection.cc (a connection on the loop) and server_tls.cc (the TLS
// listener's sessions). Not part of any interface: include it from those only.
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "common/mutex.h"
#include "seedd/logging.h"
#include "transport/address_limits.h"
#include "transport/resolver_pool.h"
#include "transport/server.h"
#include "transport/tls.h"

namespace seedd {

// A peer whose request was bad gets this long to read our error response.
inline constexpr std::chrono::milliseconds kErrorWriteTimeout{1000};
// When a peer refused for capacity (a full data plane) is told to try again.
inline constexpr int kBusyRetryMs = 2000;

// A warning that a flood would repeat: logged at most once a second, with how
// many times it happened since.
class ThrottledWarning {
 public:
  template <typename... Args>
  void Warn(fmt::format_string<Args...> format, Args&&... args) {
    MutexLock lock(mu_);
    ++count_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    Logger().warn("{} (x{} in the last second)", fmt::format(format, std::forward<Args>(args)...),
                  count_);
    last_ = now;
    count_ = 0;
  }

 private:
  Mutex mu_;
  std::chrono::steady_clock::time_point last_ GUARDED_BY(mu_){};
  size_t count_ GUARDED_BY(mu_) = 0;
};

// Sends as much of `frame` as the socket takes now. Returns the bytes sent and,
// in *would_block, whether the rest waits for the peer to read (otherwise all
// was sent or the peer is gone).
size_t SendWithoutWaiting(int fd, std::string_view frame, bool* would_block);
// The per-address limits `o` asks for.
AddressLimitOptions LimitsFrom(const TransportOptions& o);
// `d` in seconds, for messages ("1.5").
std::string Seconds(std::chrono::milliseconds d);
// The request's kind as a metric label: one served here, else "unknown" (a
// peer's free text never becomes a label).
std::string KnownKind(const RequestHandler& handler, const TransportOptions& options,
                      const Json& request);
// A response frame's status ("ok", "miss"; anything else "error"), for metrics.
std::string Outcome(const std::string& frame);

class Connection;
class ControlExchange;

struct SeedServer::Rep {
  Rep(const RequestHandler& h, const TransportOptions& o)
      : handler(h),
        options(o),
        acceptor(io),
        retry_timer(io),
        pool(std::min(o.min_resolver_threads, o.max_resolver_threads), o.max_resolver_threads),
        // A stream holds its thread for its connection's life (a TLS answer
        // until its peer has read it): one that finds none free gets one at
        // once.
        streams(1, std::max<size_t>(1, o.max_streams), std::chrono::milliseconds(0)),
        limits(LimitsFrom(o)) {}

  void DoAccept();
  // Accepts what is waiting (a few at a time), then waits for more.
  void AcceptReady();
  // A connection accepted from `peer`: the limits, then TLS, or Admitted.
  void Accepted(int fd, const std::string& peer);
  // An accepted plain TCP connection from `peer`, admitted. Off the loop (the
  // second acceptor), what needs the loop is posted to it.
  void Admitted(int fd, const std::string& peer, bool on_loop = true);
  // The second acceptor: a thread that accepts beside the loop and answers
  // what it can at once (as the loop does), so that two cores answer small
  // requests together; anything else it posts to the loop. Until stop_fd.
  void AcceptBesideTheLoop();
  // Admits a connection the second acceptor took (on a plain listener), or
  // false when the loop must decide (a cap reached, a refusal to log, an
  // eviction).
  bool AdmitBesideTheLoop(int fd, const std::string& peer);
  // Posts `fn` (a connection the second acceptor admitted) to the loop, counted
  // open from now until `fn` has run: the connection is open all along, for
  // the cap, for open_connections and for Close.
  void PostCounted(std::function<void()> fn);
  // Posts a connection the second acceptor took but did not admit to the
  // loop's Accepted, which decides. Counted for Close until it has run, never
  // for the cap: a connection waiting to be judged is not open, and counting
  // it would refuse it against itself.
  void PostUndecided(int fd, std::string peer);
  // The stream handler (the data plane) `request` is for, or null.
  const StreamHandler* FindStream(const Json& request) const;
  // `fd` as a socket of the loop; false (and `fd` closed) when asio refuses it.
  bool Wrap(int fd, asio::ip::tcp::socket* socket);
  // A whole authenticated request read at accept (`request_bytes` of it), not
  // for the data plane: its exchange, then Resolve.
  void AnswerOffLoop(int fd, const std::string& peer, Json request, size_t request_bytes);
  // The one path of a resolved request, whoever read it (the fast path or a
  // Connection; a TLS session resolves on its own stream thread): answered at
  // once when its seedable can without blocking (a small artifact in the page
  // cache), else resolved on a resolver thread, which then owns `fd`. `opened`:
  // the connection is counted open already. The socket is never registered with
  // the loop unless the response does not fit the socket buffer.
  void Resolve(int fd, const std::string& peer, const ControlExchange& exchange, Json request,
               std::chrono::steady_clock::time_point start, bool opened);
  // Sends `frame` on `fd` (accepted at `start`) and closes it, or hands the rest
  // to the loop; then the connection is over.
  void Respond(int fd, const std::string& peer, const ControlExchange& exchange, std::string frame,
               std::chrono::steady_clock::time_point start);
  // The loop's path for `fd`, with the bytes read from it so far.
  void OnLoop(int fd, const std::string& peer, const char* bytes, size_t n);
  void Register(Connection* c);
  void Unregister(Connection* c);

  const RequestHandler& handler;
  const TransportOptions options;

  // Declared before the I/O objects: connections unregister while those are destroyed.
  mutable Mutex mu;
  std::condition_variable cv;
  std::unordered_set<Connection*> connections GUARDED_BY(mu);
  size_t open GUARDED_BY(mu) = 0;
  size_t undecided GUARDED_BY(mu) = 0;   // PostUndecided's, not run yet
  bool accepting GUARDED_BY(mu) = true;  // until Close stops it
  bool closing = false;                  // loop thread only

  asio::io_context io;
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  ResolverPool pool;
  ResolverPool streams;  // data-plane connections handed to a StreamHandler
  Mutex streams_mu;
  std::unordered_set<int> stream_fds GUARDED_BY(streams_mu);  // sockets of running handlers
  bool streams_closing GUARDED_BY(streams_mu) = false;
  std::thread loop;
  std::thread second_acceptor;
  int stop_fd = -1;  // an eventfd: written to stop the second acceptor
  bool started = false;
  bool closed = false;
  bool v6 = false;  // the listener's protocol
  std::chrono::steady_clock::time_point last_cap_log{};
  size_t refused_since_log = 0;
  AddressLimits limits;
  ThrottledWarning refused_address;  // per-address limits
  ThrottledWarning failed_auth;
  ThrottledWarning busy_streams;
  ThrottledWarning tls_failures;
  ThrottledWarning tls_evictions;
  std::atomic<size_t> tls_open{0};  // TLS sessions (count in max_connections)
  // TLS connections not yet authenticated: at most MaxPendingTls(); a newcomer
  // past that takes the place of one from the host holding the most, or else of
  // the oldest (see AdmitTls), so that neither a few hosts holding many nor many
  // hosts holding one each can keep others out.
  struct PendingTls {
    std::string peer;
    int fd;
  };
  Mutex tls_mu;
  std::map<uint64_t, PendingTls> tls_pending GUARDED_BY(tls_mu);  // by session id
  uint64_t tls_next_id GUARDED_BY(tls_mu) = 0;
  size_t MaxPendingTls() const { return std::max<size_t>(64, options.max_connections / 4); }
  // Admits a session for `peer` on `fd`, making room when full; its id.
  uint64_t AdmitTls(const std::string& peer, int fd);
  void EndPendingTls(uint64_t id);

  bool Tls() const {
    return options.tls != nullptr && options.tls->rep() != nullptr &&
           options.tls->rep()->server != nullptr;
  }
  // An admitted connection on a TLS listener: the handshake and the request on
  // the handshake thread, then the answer (or the data plane) on a stream thread.
  void ServeTls(asio::ip::tcp::socket socket, const std::string& peer);

  // The handshake thread: one loop waiting on every TLS connection between
  // accept and a whole request, each bounded by request_timeout as a whole (a
  // timer, not a timeout per read). Everything below runs on it, but
  // TlsRequest (a stream thread) and Start/StopTlsThread.
  struct TlsSession;
  using TlsStepFn = void (Rep::*)(const std::shared_ptr<TlsSession>&);
  asio::io_context tls_io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> tls_work;
  std::thread tls_loop;
  std::map<uint64_t, std::weak_ptr<TlsSession>> tls_handshaking;  // by session id
  bool tls_closing = false;
  void StartTlsThread();
  // Ends every session still in its handshake or request, then joins the thread.
  void StopTlsThread();
  void BeginTls(const std::shared_ptr<TlsSession>& s);
  void PeekTls(const std::shared_ptr<TlsSession>& s);
  void HandshakeTls(const std::shared_ptr<TlsSession>& s);
  void ReadTlsRequest(const std::shared_ptr<TlsSession>& s);
  // Calls `next` once the socket is ready for what `want` says.
  void WaitTls(const std::shared_ptr<TlsSession>& s, Conn::Step want, TlsStepFn next);
  // Stops the session's waits and timer: it ends once their handlers have run.
  void EndTls(TlsSession& s);
  // Ends after reading and dropping what the peer still sends, for a little
  // while, so that what we sent last reaches it (a reset could discard it).
  void LingerTls(const std::shared_ptr<TlsSession>& s);
  void DrainTls(const std::shared_ptr<TlsSession>& s);
  // Sends `response` without waiting (what the socket takes), then lingers.
  void AnswerAndLinger(const std::shared_ptr<TlsSession>& s, const Json& response);
  void AnswerAndLinger(const std::shared_ptr<TlsSession>& s, const std::string& frame);
  // On a stream thread: carries out the session's exchange (a resolve and its
  // answer, or the data plane).
  void TlsRequest(TlsSession& s);
};

}  // namespace seedd
