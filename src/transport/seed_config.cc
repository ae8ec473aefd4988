#include "seedd/seed_config.h"

#include <charconv>

namespace seedd {

std::string HostPort::ToString() const {
  if (is_ipv6()) {
    return "[" + host + "]:" + std::to_string(port);
  }
  return host + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid address '" + std::string(text) + "': " +
                                   std::string(why) + " (expected HOST:PORT or [V6ADDR]:PORT)");
  };
  if (text.size() > 300) {
    return Status::InvalidArgument("invalid address: longer than 300 bytes");
  }
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("unterminated '['");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("missing ':PORT'");
    port = text.substr(close + 2);
    if (host.find(':') == std::string_view::npos) return bad("brackets are for IPv6 addresses");
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':PORT'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("IPv6 addresses need [brackets]");
  }
  if (host.empty()) return bad("empty host");
  if (host.size() > 253) return bad("host longer than 253 bytes");
  for (char c : host) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '/' || c == '[' || c == ']') {
      return bad("host has a forbidden character");
    }
  }
  if (port.empty() || port.size() > 5) return bad("port must be 0-65535");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return bad("port must be 0-65535");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

Status SeedConfig::Validate() const {
  if ((listen.has_value() || source.has_value()) && token.empty()) {
    return Status::InvalidArgument("A daemon-to-daemon listener/source requires a token");
  }
  return Status::Ok();
}

}  // namespace seedd
