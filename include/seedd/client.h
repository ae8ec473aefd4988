// A blocking client of the control channel: one request, one response, every
// step bounded by a deadline (what seedctl uses to talk to a daemon).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedd {

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
  // Set to stop: a plain-TCP exchange returns Cancelled within about 50 ms of
  // it, connecting or waiting (one over TLS at its deadlines).
  std::shared_ptr<const std::atomic<bool>> cancel;
};

// Sends `request` as one frame and returns the parsed response (any JSON value).
Result<Json> ExchangeJson(const HostPort& peer, const Json& request,
                          const ExchangeOptions& options);

}  // namespace seedd
