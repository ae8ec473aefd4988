#include "wire/frame.h"

#include <algorithm>
#include <cstring>

#include "seedd/json_text.h"

namespace seedd {

namespace {

void PutLength(uint64_t n, char* header) {
  for (int i = 7; i >= 0; --i) {
    header[i] = static_cast<char>(n & 0xff);
    n >>= 8;
  }
}

}  // namespace

std::string EncodeFrame(std::string_view body) {
  std::string out(kFrameHeaderBytes + body.size(), '\0');
  PutLength(body.size(), out.data());
  std::memcpy(out.data() + kFrameHeaderBytes, body.data(), body.size());
  return out;
}

std::string EncodeJsonFrame(const Json& value) {
  std::string out(kFrameHeaderBytes, '\0');
  AppendJson(value, &out);  // straight after the header: no second copy of the body
  SealFrame(&out);
  return out;
}

void SealFrame(std::string* frame) { PutLength(frame->size() - kFrameHeaderBytes, frame->data()); }

size_t FrameReader::Feed(std::string_view data) {
  size_t used = 0;
  if (state_ == State::kHeader) {
    size_t take = std::min(kFrameHeaderBytes - header_have_, data.size());
    std::memcpy(header_ + header_have_, data.data(), take);
    header_have_ += take;
    used += take;
    if (header_have_ < kFrameHeaderBytes) {
      return used;
    }
    uint64_t n = 0;
    for (unsigned char b : header_) {
      n = (n << 8) | b;
    }
    if (n > max_body_bytes_) {
      state_ = State::kFailed;
      error_ = Status::ResourceExhausted("Message size " + std::to_string(n) + " exceeds limit " +
                                         std::to_string(max_body_bytes_));
      return used;
    }
    body_size_ = n;
    // Grow with the bytes that actually arrive: a header alone commits little memory.
    body_.reserve(std::min<uint64_t>(n, 1 << 20));
    state_ = n == 0 ? State::kDone : State::kBody;
  }
  if (state_ == State::kBody) {
    size_t take = std::min<uint64_t>(body_size_ - body_.size(), data.size() - used);
    body_.append(data.data() + used, take);
    used += take;
    if (body_.size() == body_size_) {
      state_ = State::kDone;
    }
  }
  return used;
}

Status FrameReader::EndOfStreamError() const {
  if (state_ == State::kHeader && header_have_ == 0) {
    return Status::Unavailable("connection closed before a message arrived");
  }
  if (state_ == State::kHeader) {
    return Status::Unavailable("connection closed inside a message header (" +
                               std::to_string(header_have_) + " of 8 bytes)");
  }
  return Status::Unavailable("connection closed inside a message (" + std::to_string(body_.size()) +
                             " of " + std::to_string(body_size_) + " bytes)");
}

}  // namespace seedd
