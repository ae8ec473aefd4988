// Safetensors headers: parsed and validated before any byte of the file is trusted.
// Layout: an 8-byte little-endian header length N, N bytes of JSON
// {"<tensor>": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "seedd/json.h"
#include "seedd/status.h"
#include "seedd/weights.h"

namespace seedd {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsHeader {
  uint64_t header_bytes = 0;        // N
  std::string header_json;          // the N bytes, as they are in the file
  std::vector<TensorInfo> tensors;  // sorted by begin
};

// Bytes per element of a safetensors dtype; 0 when unknown.
uint64_t DtypeBytes(std::string_view dtype);

// Parses and validates a header given the file's first bytes (at least 8; the
// header when N fits) and the file size. Errors name the problem: a header longer
// than the file, an unknown dtype, offsets outside the data, overlapping tensors,
// a byte range that does not match dtype and shape.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix, uint64_t file_size);

// Reads and validates the header of the file at `path`.
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);

}  // namespace seedd
