// StoreUrl: the parts of a store URL. Pure; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

struct StoreUrl {
  std::string scheme;
  std::optional<std::string> user;
  std::optional<std::string> password;
  std::string host;
  std::optional<uint16_t> port;
  std::string path;                          // percent-decoded, starts with '/' when present
  std::map<std::string, std::string> query;  // percent-decoded

  // Parses scheme://[user[:password]@]host[:port][/path][?k=v&...].
  static Result<StoreUrl> Parse(std::string_view url);
};

std::optional<std::string> PercentDecode(std::string_view s);

}  // namespace seedd
