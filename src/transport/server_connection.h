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
#include "transport/exchange.h"
#include "transport/handler.h"
#include "transport/server_rep.h"
#include "wire/frame.h"

namespace seedd {

// One peer's connection on the loop: read one frame (two after a challenge),
// let its ControlExchange decide, send a refusal or hand the socket on. Lives in shared_ptrs held
// by its pending handlers.
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
  // A whole frame read: the exchange decides; this connection sends a refusal
  // or a challenge itself, or hands its socket to a stream thread or to a resolve.
  void OnRequest();
  // The socket leaves the loop for the resolve (SeedServer::Rep::Resolve), which
  // answers and closes it: one owner at a time, never two.
  void HandToResolve(Json request);
  // The socket leaves the loop for a stream thread; the connection ends here.
  // A full queue gets an error.
  void HandOver(const StreamHandler& handler, Json request);
  void RespondError(const std::string& message);
  // Sends `frame` (an error; `outcome` for the access log), then closes.
  void Respond(const std::string& outcome, std::string frame);
  // On the loop thread.
  void Write(std::string frame);
  void CloseSocket();

  SeedServer::Rep* server_;  // only the loop thread touches what follows
  ControlExchange exchange_;
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
  bool handed_off_ = false;     // to a resolve, which logs the access and ends the count
  // For the access log.
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string kind_ = "-";
  std::string outcome_ = "closed";
  size_t bytes_out_ = 0;
};

}  // namespace seedd
