// SeedConfig: one daemon's D2D seeding configuration, and host:port parsing.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

struct HostPort {
  std::string host;  // IPv4 literal, hostname, or IPv6 literal without brackets.
  uint16_t port = 0;

  bool is_ipv6() const { return host.find(':') != std::string::npos; }
  // "host:port", or "[v6addr]:port".
  std::string ToString() const;
  bool operator==(const HostPort&) const = default;
};

// Parses "host:port" or "[v6addr]:port". The port is 0-65535; the host is non-empty,
// at most 253 bytes, and has no whitespace or control characters.
Result<HostPort> ParseHostPort(std::string_view text);

struct SeedConfig {
  std::optional<HostPort> listen;
  std::optional<HostPort> source;
  std::string token;  // The shared secret. Never logged.

  // A listener or a source without a token: InvalidArgument
  // "A daemon-to-daemon listener/source requires a token".
  Status Validate() const;
};

}  // namespace seedd
