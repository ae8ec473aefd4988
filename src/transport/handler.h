// RequestHandler: the source side of the protocol without sockets. It
// authenticates a request and dispatches it to the seedable of its kind.
//
// Thread safety: immutable after construction but for the tokens (a TokenRing);
// every method may be called from any thread at once (seedables' Resolve must
// be thread-safe).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/json.h"
#include "seedd/seedable.h"
#include "seedd/tokens.h"

namespace seedd {

// Builds {"status":"error","message":message}.
Json ErrorResponse(std::string_view message);

class RequestHandler {
 public:
  // REQUIRES: seedables have distinct kinds.
  RequestHandler(std::vector<SeedablePtr> seedables, std::string token);
  // The tokens accepted are `tokens`' at each request (they may be replaced).
  RequestHandler(std::vector<SeedablePtr> seedables, std::shared_ptr<const TokenRing> tokens);

  // True when this daemon has a token and `request` is an object whose "token"
  // is a string equal to one of them (compared in constant time).
  bool Authenticate(const Json& request) const;

  // Answers an authenticated request: ok / miss / error.
  Json Handle(const Json& request) const;
  // Handle's response as frame bytes, the payload from the seedable's ResolveText.
  std::string HandleToFrame(const Json& request) const;
  // HandleToFrame when the seedable can answer without blocking
  // (Seedable::ResolveTextNow), or the request's kind is unknown; else nullopt.
  std::optional<std::string> HandleToFrameNow(const Json& request) const;

  // The whole source-side exchange for one received frame body: parse,
  // authenticate, handle. Used by the fuzzer and by tests.
  Json HandleFrameBody(std::string_view body) const;

  const Seedable* Find(std::string_view kind) const;
  // The tokens accepted (any) and sent (the first).
  const TokenRing& tokens() const { return *tokens_; }

 private:
  // The seedable of the request's "kind", if any.
  const Seedable* FindFor(const Json& request) const;
  std::map<std::string, SeedablePtr, std::less<>> seedables_;
  std::shared_ptr<const TokenRing> tokens_;
};

}  // namespace seedd
