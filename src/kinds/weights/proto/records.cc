#include "kinds/weights/proto/records.h"

#include <algorithm>
#include <cstring>

namespace seedd {
namespace {

void PutU32(uint32_t v, char* p) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

RequestRecord EncodeRequest(std::string_view magic, uint32_t index) {
  RequestRecord r{};
  std::memcpy(r.data(), magic.data(), 4);
  PutU32(index, r.data() + 4);
  return r;
}

uint32_t RequestIndex(const RequestRecord& record) { return GetU32(record.data() + 4); }

HeaderRecord EncodeHeader(std::string_view magic, uint32_t index, uint32_t status, uint32_t aux,
                          uint64_t length) {
  HeaderRecord h{};
  std::memcpy(h.data(), magic.data(), 4);
  PutU32(index, h.data() + 4);
  PutU32(status, h.data() + 8);
  PutU32(aux, h.data() + 12);
  PutU32(static_cast<uint32_t>(length >> 32), h.data() + 16);
  PutU32(static_cast<uint32_t>(length), h.data() + 20);
  return h;
}

Header DecodeHeader(const HeaderRecord& record) {
  const char* p = record.data();
  return Header{std::string_view(p, 4), GetU32(p + 4), GetU32(p + 8), GetU32(p + 12),
                (uint64_t{GetU32(p + 16)} << 32) | GetU32(p + 20)};
}

std::chrono::milliseconds TransferDeadline::Within(uint64_t bytes) const {
  const uint64_t rate = std::max<uint64_t>(min_rate, 1);
  return grace + std::chrono::milliseconds(bytes / rate * 1000 + bytes % rate * 1000 / rate);
}

}  // namespace seedd
