// TokenRing: the shared tokens a daemon accepts and the one it sends, which may
// change while it runs (a rotation: a token file re-read on SIGHUP).
//
// A rotation without a restart, every daemon re-reading its file after each
// step: (1) "OLD\nNEW" — NEW is accepted everywhere, OLD still sent; (2)
// "NEW\nOLD" — NEW is sent; (3) "NEW" — OLD is refused.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace seedd {

class TokenRing {
 public:
  explicit TokenRing(std::vector<std::string> tokens = {});
  // Replaces every token; empty tokens are dropped.
  void Replace(std::vector<std::string> tokens);
  // The token sent: the first; empty when there is none.
  std::string Sent() const;
  // Whether `token` is one of them (each compared in constant time); false when
  // there is none.
  bool Accepts(std::string_view token) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> tokens_;  // GUARDED_BY(mu_)
};

}  // namespace seedd
