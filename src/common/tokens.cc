#include "seedd/tokens.h"

#include <algorithm>

#include "common/crypto.h"

namespace seedd {

TokenRing::TokenRing(std::vector<std::string> tokens) { Replace(std::move(tokens)); }

void TokenRing::Replace(std::vector<std::string> tokens) {
  tokens.erase(std::remove(tokens.begin(), tokens.end(), std::string()), tokens.end());
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(tokens);
}

std::string TokenRing::Sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.empty() ? std::string() : tokens_.front();
}

bool TokenRing::Accepts(std::string_view token) const {
  std::lock_guard<std::mutex> lock(mu_);
  bool accepted = false;
  for (const std::string& t : tokens_) accepted |= ConstantTimeEquals(token, t);
  return accepted;
}

size_t TokenRing::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.size();
}

}  // namespace seedd
