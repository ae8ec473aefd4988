// Blocking client side of the control channel: one request, one response, with a
// connect timeout and a deadline for the whole response.
//
// Thread safety: free functions without shared state; thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "seedd/client.h"
#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedd {

using Clock = std::chrono::steady_clock;

// Connects to `peer` (every resolved address in turn) within `timeout`. Gives
// up (Cancelled) within 50 ms of `*cancel` turning true (null: the stop flag
// of the exchange this thread runs, if any).
Result<UniqueFd> ConnectTcp(const HostPort& peer, std::chrono::milliseconds timeout,
                            const std::atomic<bool>* cancel = nullptr);

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

}  // namespace seedd
