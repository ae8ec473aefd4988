// Fuzzes safetensors header validation: the first bytes of a file a peer or a
// user supplies, against a file size taken from the input too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kinds/weights/files/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t extra = 0;
  std::memcpy(&extra, data, 8);  // how much the file holds past these bytes
  std::string_view prefix(reinterpret_cast<const char*>(data) + 8, size - 8);
  auto header = seedd::ParseSafetensorsHeader(prefix, prefix.size() + (extra % (1ull << 40)));
  if (!header.ok()) return 0;
  for (const auto& t : header->tensors) {
    if (t.begin > t.end) std::abort();
  }
  return 0;
}
