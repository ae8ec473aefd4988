// Fuzzes the data plane's binary records: whatever 24 bytes arrive decode to a
// header that encodes back to the same bytes; requests likewise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kinds/weights/proto/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  seedd::HeaderRecord record{};
  std::memcpy(record.data(), data, std::min(size, record.size()));
  const seedd::Header h = seedd::DecodeHeader(record);
  if (seedd::EncodeHeader(h.magic, h.index, h.status, h.aux, h.length) != record) std::abort();
  seedd::RequestRecord request{};
  std::memcpy(request.data(), data, std::min(size, request.size()));
  const uint32_t index = seedd::RequestIndex(request);
  if (seedd::EncodeRequest(std::string_view(request.data(), 4), index) != request) std::abort();
  return 0;
}
