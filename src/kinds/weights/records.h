// The binary records of the weight data plane (docs/protocol.md): 8-byte
// requests and 24-byte response headers, integers big-endian.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

enum ChunkStatus : uint32_t { kChunkOk = 0, kChunkNotHere = 1, kChunkClaimed = 2, kChunkHole = 3 };

inline constexpr std::string_view kSendMagic = "SDRQ";   // send the chunk
inline constexpr std::string_view kClaimMagic = "SDRN";  // send it unless a relay got it
inline constexpr std::string_view kStateMagic = "SDST";  // the server's state
inline constexpr std::string_view kChunkMagic = "SDCH";  // a chunk response

using RequestRecord = std::array<char, 8>;
using HeaderRecord = std::array<char, 24>;

struct Header {
  std::string_view magic;  // points into the record it was decoded from
  uint32_t index = 0;
  uint32_t status = 0;
  uint32_t aux = 0;
  uint64_t length = 0;
};

RequestRecord EncodeRequest(std::string_view magic, uint32_t index);
// The index of a request record (its magic is the first 4 bytes).
uint32_t RequestIndex(const RequestRecord& record);
HeaderRecord EncodeHeader(std::string_view magic, uint32_t index, uint32_t status, uint32_t aux,
                          uint64_t length);
Header DecodeHeader(const HeaderRecord& record);

// Blocking socket I/O for the data plane: all of it or an error. Sends never
// raise SIGPIPE.
bool SendAll(int fd, const char* p, size_t n);
Status RecvAll(int fd, char* p, size_t n);

}  // namespace seedd
