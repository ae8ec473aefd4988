// The binary records of the weight data plane (docs/protocol.md): 8-byte
// requests and 24-byte response headers, integers big-endian.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace seedd {

enum ChunkStatus : uint32_t {
  kChunkOk = 0,
  kChunkNotHere = 1,
  kChunkClaimed = 2,
  kChunkHole = 3,
  kChunkBusy = 4,  // every upload slot is taken: ask elsewhere, here not before aux ms
};

// A relay's HOST:PORT, as announced (the "relay" of a data request) and as a
// "claimed" answer names the claim's holder: at most this long.
inline constexpr size_t kMaxRelayNameBytes = 300;

inline constexpr std::string_view kSendMagic = "SDRQ";   // send the chunk
inline constexpr std::string_view kClaimMagic = "SDRN";  // send it unless a relay got it
// The same two from a fetcher with no chunk arriving from anyone: turned away
// "busy" moments ago, it waits in line for the next upload slot.
inline constexpr std::string_view kSendWaitingMagic = "SDRW";
inline constexpr std::string_view kClaimWaitingMagic = "SDNW";
inline constexpr std::string_view kStateMagic = "SDST";  // the server's state
inline constexpr std::string_view kChunkMagic = "SDCH";  // a chunk response
inline constexpr std::string_view kWatchMagic = "SDWT";  // the chunks new since a cursor
inline constexpr std::string_view kHaveMagic = "SDHV";   // its response
// A watch for the chunks the fetcher wants: the record is followed by a bitmap
// of them (ceil(chunks/8) bytes, as a state's); answered "SDHV" with those alone.
inline constexpr std::string_view kWatchWantedMagic = "SDWW";
// A watch is answered as soon as the server has a new chunk, or after this.
inline constexpr std::chrono::milliseconds kWatchWait{1000};
// "SDHV" aux: the server has every chunk (nothing more will come).
inline constexpr uint32_t kHaveComplete = 1;

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

// How long one data-plane transfer may take: `grace` plus its length at
// `min_rate`. A peer slower than that (a trickle, a peer that stopped reading)
// fails the transfer instead of holding the connection forever.
struct TransferDeadline {
  std::chrono::milliseconds grace{10000};
  uint64_t min_rate = 256 * 1024;  // bytes per second
  // The time `bytes` may take; the driver adds it to its clock's now.
  std::chrono::milliseconds Within(uint64_t bytes) const;
};

}  // namespace seedd
