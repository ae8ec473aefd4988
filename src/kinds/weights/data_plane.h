// The weight data plane. A connection whose authenticated request is
// {"kind": "weight_data", "root_digest": H, "relay": "HOST:PORT" (optional),
// "session": S (with relay: a fetch's random id; a new one drops its old claims)} is
// answered with one JSON frame ({"status": "ok", "chunks": N} or an error) and
// then carries binary records (integers big-endian):
//   request  (8 bytes):  magic, chunk index (u32); pipelined. Magic is
//     "SDRQ"  send the chunk;
//     "SDRN"  send it unless a relay of this swarm was already sent it (status 2);
//     "SDRW", "SDNW"  the same two from a fetcher with no chunk arriving: it may
//             wait in line for an upload slot (WeightServer::TakeSlot). The
//             "ok" frame says "wait_in_line": true when the server takes them;
//     "SDST"  the server's state (index ignored): which chunks it has, its peers;
//     "SDWT"  the chunks it verified since cursor `index` (from a "SDST" or an
//             earlier "SDWT"), answered once it has one or after kWatchWait.
//   response (24 bytes): "SDCH" (or "SDST", "SDHV"), chunk index (u32), status
//     (u32), aux (u32), length (u64); then `length` bytes. Status is
//     0  ok: `length` raw bytes of the chunk follow, sent with sendfile;
//     1  not here (a relay that has not verified it yet, or no such chunk);
//     2  claimed: a relay was sent it; aux = ms since that send completed
//        (0xffffffff while it is still being sent): fetch it from the peers;
//     3  a hole: the chunk is all zeros, no bytes follow;
//     4  busy: the server sends upload_slots chunks to relays already; ask
//        another peer, and this one not before aux ms.
//   The "SDST" body is the have bitmap (ceil(N/8) bytes, chunk i is bit
//   0x80 >> (i % 8) of byte i / 8) followed by at most max_peers_listed peers
//   that announced themselves for this root digest (half the relays holding
//   the most chunks this server sent, half at random), one HOST:PORT per line; its aux is the
//   cursor to watch from. The "SDHV" index is the next cursor, aux kHaveComplete when the server
//   has every chunk, and the body the new chunks' indexes (u32 each).
// Bytes never travel inside JSON; every chunk is verified by the fetcher.
//
// The serving side is net/weight_server.h, the fetching side net/fetcher.h; the
// records' codec is proto/records.h. The weight_shards kind that sends manifests
// on the control channel is weight_shards_kind.h.
#pragma once

#include <string_view>

namespace seedd {

inline constexpr std::string_view kWeightShardsKind = "weight_shards";
inline constexpr std::string_view kWeightDataKind = "weight_data";

}  // namespace seedd
