#include "seedd/tokens.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/crypto.h"
#include "seedd/logging.h"

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

bool TokenRing::AnyOf(const std::function<bool(std::string_view token)>& check) const {
  std::lock_guard<std::mutex> lock(mu_);
  bool any = false;
  for (const std::string& t : tokens_) any |= check(t);
  return any;
}

size_t TokenRing::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.size();
}

Result<std::vector<std::string>> LoadTokens(
    const std::optional<std::filesystem::path>& token_file) {
  constexpr size_t kMaxTokenBytes = 4096;
  std::string text;
  const std::string where = token_file.has_value() ? token_file->string() : "SEEDD_TOKEN";
  if (token_file.has_value()) {
    std::ifstream in(*token_file, std::ios::binary);
    if (!in) {
      return Status::NotFound("cannot read the token file " + where + ": " + std::strerror(errno));
    }
    text.resize(kMaxTokenBytes + 1);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxTokenBytes) {
      return Status::InvalidArgument("the token file " + where + " is larger than 4 KiB");
    }
    struct stat st {};
    if (::stat(token_file->c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      Logger().warn("The token file {} is readable by others (mode {}): chmod 600 {}", where, mode,
                    where);
    }
  } else if (const char* env = std::getenv("SEEDD_TOKEN"); env != nullptr) {
    text = env;
  }
  std::vector<std::string> tokens;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.pop_back();
    }
    if (line.empty()) continue;
    // Sent inside JSON, a byte outside printable ASCII would be escaped or
    // rejected on the way, and every request would then be "Unauthorized".
    for (size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (c < 0x20 || c > 0x7e) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", c);
        return Status::InvalidArgument(
            "the token in " + where +
            (token_file.has_value() ? " (line " + std::to_string(line_no) + ")" : "") +
            " holds a byte that is not printable ASCII (" + hex + " at offset " +
            std::to_string(i) + "); use printable ASCII, e.g. openssl rand -hex 32");
      }
    }
    tokens.push_back(std::move(line));
  }
  if (token_file.has_value() && tokens.empty()) {
    return Status::InvalidArgument("the token file " + where + " is empty");
  }
  return tokens;
}

Status CheckTokenStrength(const std::vector<std::string>& tokens, const std::string& where) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].size() < kMinTokenBytes) {
      return Status::InvalidArgument(
          "the token " + (tokens.size() > 1 ? std::to_string(i + 1) + " " : std::string()) + "in " +
          where + " has " + std::to_string(tokens[i].size()) + " bytes; at least " +
          std::to_string(kMinTokenBytes) + " are needed (e.g. openssl rand -hex 32)");
    }
  }
  return Status::Ok();
}

Result<std::string> LoadToken(const std::optional<std::filesystem::path>& token_file) {
  Result<std::vector<std::string>> tokens = LoadTokens(token_file);
  if (!tokens.ok()) return tokens.status();
  return tokens->empty() ? std::string() : tokens->front();
}

}  // namespace seedd
