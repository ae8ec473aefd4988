// One request's exchange on the control channel, the same whichever way the
// request came: read whole at accept (the fast path), on the loop (a
// Connection), or in a TLS session. It parses the frame, authenticates it by the
// token or by the data plane's challenge (data_auth.h), counts and logs a
// failure against the peer's address, checks a stream's per-address bound, and
// labels the metrics. It only decides: the socket's owner sends the frame it
// returns, and runs the resolve or the stream handler it names.
//
// Thread safety: one exchange is used by one thread at a time (the socket's
// owner, which may hand both on together).
#pragma once

#include <string>
#include <string_view>

#include "seedd/json.h"
#include "transport/server_rep.h"

namespace seedd {

class ControlExchange {
 public:
  enum class Next {
    kRespond,    // send `frame` (an error), then close
    kChallenge,  // send `frame`, then read the fetcher's proof: a frame for OnFrame
    kStream,     // hand the socket to `stream` with `request` (the data plane)
    kResolve,    // resolve `request` (HandleToFrame), count it with Answered, send it
  };
  struct Step {
    Next next = Next::kRespond;
    std::string frame;
    Json request;
    const StreamHandler* stream = nullptr;
  };

  // `binding` ties a challenge to its TLS session (SessionBinding); empty on plain TCP.
  ControlExchange(SeedServer::Rep& rep, std::string peer, std::string binding = {});

  // A whole frame's body: the request, or after kChallenge the fetcher's proof.
  Step OnFrame(std::string_view body);
  // A request whose token the caller checked already (the fast path).
  Step OnAuthenticated(Json request);
  // Counts the answer to a resolved request; its outcome ("ok", "miss", "error").
  std::string Answered(const std::string& frame) const;

  bool authenticated() const { return authenticated_; }
  // For the access log: the request's kind (its first 64 bytes) or "-".
  const std::string& kind() const { return kind_; }
  // What the refusal said, for the access log ("error: ...").
  const std::string& refusal() const { return refusal_; }

 private:
  Step Refuse(const std::string& message, bool busy = false);
  Step RefuseUnauthorized(const Json& request);

  SeedServer::Rep& rep_;
  const std::string peer_;
  const std::string binding_;
  Json challenged_;    // the request a challenge was sent for (null: none)
  std::string nonce_;  // that challenge's nonce
  bool authenticated_ = false;
  std::string kind_ = "-";
  std::string metric_kind_ = "unknown";
  std::string refusal_;
};

}  // namespace seedd
