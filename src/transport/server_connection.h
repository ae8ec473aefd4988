// One control-channel connection on the loop's path (server.cc admits it,
// server_connection.cc runs it). Private to the transport: include it from
// server.cc and server_connection.cc only.
#pragma once

#include <array>
#include <asio.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/mutex.h"
#include "seedd/json_text.h"
#include "transport/handler.h"
#include "transport/server_rep.h"
#include "wire/frame.h"

namespace seedd {

// One peer's exchange: read one frame, authenticate, resolve off the loop, write
// one response, close. Lives in shared_ptrs held by its pending handlers.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // REQUIRES: server->limits admitted `peer` (it counts as unauthenticated).
  Connection(SeedServer::Rep* server, asio::ip::tcp::socket socket, std::string peer);
  ~Connection();

  const std::string& peer() const { return peer_; }

  // On the loop thread: closes this connection if it is still reading its
  // request (its place goes to another host's; see AddressLimits::Transfer).
  bool EvictIfReading();

  void Start();

  // Start, with the first `n` bytes of the request read already (by the
  // accepting code, which found them not a plain request it could answer).
  void StartWith(const char* bytes, size_t n);

  // An authenticated request answered off the loop whose response did not fit
  // the socket buffer: the rest is written here, by the connection's `deadline`.
  void FinishWriting(std::string rest, const std::string& kind, const std::string& outcome,
                     std::chrono::steady_clock::time_point deadline);

  // Close() on the loop thread: a connection still reading its request is dropped.
  void CloseIfReading();

 private:
  enum class State { kReading, kResolving, kWriting, kDone };

  void ArmDeadline(std::chrono::milliseconds d);
  void OnDeadline();
  void DoRead();
  void OnRead(const asio::error_code& ec, size_t n);
  void OnRequest();
  // A request that asked for the challenge (data_auth.h): the source's nonce
  // and proof are sent, and the fetcher's proof read next, in the same deadline.
  void Challenge(Json request);
  void OnProof(const Json& answer);
  // An authenticated request: handed to the data plane, or resolved.
  void OnAuthenticated(Json request);
  void RefuseUnauthorized(const Json& request);

  // On a resolver thread (or on the loop, for an answer at hand without
  // blocking). A response that fits the socket buffer (the common case)
  // is written and the connection closed right here, sparing a hop back to the
  // loop; a larger one is handed to the loop to finish under the same deadline.
  void FinishOnResolver(std::string frame);

  // The request's kind as a metric label: one served here, else "unknown" (a
  // peer's free text never becomes a label).
  std::string KnownKind(const Json& request) const;

  // The socket leaves the loop for a stream thread; the connection ends here.
  // A peer holding its share of stream threads, or a full queue, gets an error.
  void HandOver(const StreamHandler& handler, Json request);
  void RespondError(const std::string& message) { Respond(message, ErrorResponse(message)); }
  // A refusal for capacity: "retry_ms" says when to try again, and that the
  // peer did nothing wrong (a fetcher does not count it against this source).
  void RespondBusy(const std::string& message);
  void Respond(const std::string& message, const Json& response);

  // On the loop thread.
  void Write(std::string frame);
  void CloseSocket();

  SeedServer::Rep* server_;
  // Serialises the loop and a resolver thread around socket_, timer_ and state_
  // while a request is resolving; otherwise only the loop thread touches them.
  Mutex mu_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  FrameReader reader_;
  std::array<char, 16 * 1024> buf_;
  std::string out_;
  State state_ = State::kReading;
  bool deadline_hit_ = false;
  const std::string peer_;      // AddressLimits::Key of the remote address
  bool authenticated_ = false;  // else it counts against its address's limit
  bool evicted_ = false;        // its count went to the connection that took its place
  Json challenged_;             // the request a challenge was sent for (null: none)
  std::string source_nonce_;    // the nonce of that challenge
  // For the access log.
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string kind_ = "-";
  std::string metric_kind_ = "unknown";
  std::string outcome_ = "closed";
  size_t bytes_out_ = 0;
};

}  // namespace seedd
