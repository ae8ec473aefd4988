// The control channel's frame: an 8-byte unsigned big-endian length N, then N bytes
// of UTF-8 JSON text.
//
// Thread safety: FrameReader is a value type without internal locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr size_t kFrameHeaderBytes = 8;

// Header + body for `body`.
std::string EncodeFrame(std::string_view body);
// Header + compact JSON text of `value`.
std::string EncodeJsonFrame(const Json& value);
// For a frame built in place: `frame` starts with kFrameHeaderBytes bytes
// reserved for the header and holds the body after them; writes the header.
void SealFrame(std::string* frame);

// Incremental decoder of one frame. The length is checked against the limit
// before the body is allocated.
class FrameReader {
 public:
  explicit FrameReader(uint64_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  // Consumes bytes from `data`; returns how many were used. After done() or
  // failed() it consumes nothing (bytes past the frame belong to nobody).
  size_t Feed(std::string_view data);

  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  // The error after failed(): "Message size N exceeds limit L".
  const Status& error() const { return error_; }
  // True once any byte has arrived; used to word end-of-stream errors.
  bool started() const { return header_have_ > 0; }
  // The complete body. REQUIRES: done().
  std::string& body() { return body_; }
  // The status to report when the stream ends before done().
  Status EndOfStreamError() const;

 private:
  enum class State { kHeader, kBody, kDone, kFailed };

  uint64_t max_body_bytes_;
  State state_ = State::kHeader;
  unsigned char header_[kFrameHeaderBytes] = {};
  size_t header_have_ = 0;
  uint64_t body_size_ = 0;
  std::string body_;
  Status error_;
};

}  // namespace seedd
