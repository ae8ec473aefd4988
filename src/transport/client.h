// Blocking client side of the control channel: one request, one response, with a
// connect timeout and a deadline for the whole response.
//
// Thread safety: free functions without shared state; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedd {

using Clock = std::chrono::steady_clock;

// Connects to `peer` (every resolved address in turn) within `timeout`.
Result<UniqueFd> ConnectTcp(const HostPort& peer, std::chrono::milliseconds timeout);

// Every address `peer`'s host resolves to (IPv4 and IPv6, in the resolver's
// order, duplicates removed), each with `peer`'s port: a name such as a
// Kubernetes headless service stands for many hosts. A literal address is
// returned as it is.
Result<std::vector<HostPort>> ResolveAll(const HostPort& peer);

// Writes all of `data` before `deadline`.
Status WriteAll(int fd, std::string_view data, Clock::time_point deadline);

// Reads one frame body of at most `max_bytes` before `deadline`; its first byte
// must arrive before `first_byte_deadline` (when earlier than `deadline`).
Result<std::string> ReadFrameBody(int fd, uint64_t max_bytes, Clock::time_point deadline,
                                  Clock::time_point first_byte_deadline = Clock::time_point::max());

struct ExchangeOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds response_timeout{300000};  // the whole response
  // The response's first byte, from the request sent: a peer that accepts and
  // then says nothing (a wrong port) is named within this time.
  std::chrono::milliseconds first_byte_timeout = response_timeout;
  uint64_t max_response_bytes = 64 * 1024 * 1024;
  // TLS when it has a CA, the peer verified against it (and its name); else
  // plain TCP.
  std::shared_ptr<const TlsContext> tls;
};

// Sends `request` as one frame and returns the parsed response (any JSON value).
Result<Json> ExchangeJson(const HostPort& peer, const Json& request,
                          const ExchangeOptions& options);

}  // namespace seedd
