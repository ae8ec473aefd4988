// The shared tokens: read from a token file or SEEDD_TOKEN (LoadTokens), and
// TokenRing, those a daemon accepts and the one it sends, which may change while
// it runs (a rotation: a token file re-read on SIGHUP).
//
// A rotation without a restart, every daemon re-reading its file after each
// step: (1) "OLD\nNEW" — NEW is accepted everywhere, OLD still sent; (2)
// "NEW\nOLD" — NEW is sent; (3) "NEW" — OLD is refused.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/status.h"

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
  // Whether `check` holds for any of them; every one is checked, so that the
  // time taken does not tell which matched.
  bool AnyOf(const std::function<bool(std::string_view token)>& check) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> tokens_;  // GUARDED_BY(mu_)
};

// Reads the shared tokens from `token_file` when given (at most 4 KiB; one per
// line, the first the one sent, any accepted; blank lines skipped, trailing
// whitespace dropped), else from the environment variable SEEDD_TOKEN (one
// token); empty when neither is set. An unreadable file, a file without a
// token or a token with a byte outside printable ASCII is an error naming it.
Result<std::vector<std::string>> LoadTokens(const std::optional<std::filesystem::path>& token_file);
// The fewest bytes a daemon takes in a token: a shorter one is guessed too soon.
inline constexpr size_t kMinTokenBytes = 16;
// Ok when every one of `tokens` (read from `where`) has at least kMinTokenBytes;
// else an error naming the line and the way to make one.
Status CheckTokenStrength(const std::vector<std::string>& tokens, const std::string& where);
// The first of LoadTokens (the one sent); empty when there is none.
Result<std::string> LoadToken(const std::optional<std::filesystem::path>& token_file);

}  // namespace seedd
