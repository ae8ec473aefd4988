// The daemon's Prometheus metrics (prometheus-cpp): counters, gauges and a
// histogram that the transport, the data plane, the stores and the daemon move,
// and their exposition in the text format for /metrics. docs/operations.md lists
// every metric with its meaning.
//
// One registry per process, like a Prometheus client's default registry: several
// daemons in one process (tests) add up. Label values come from a fixed set or
// from names this daemon chose (kinds it serves, models it pulls, its stores'
// schemes): nothing a peer sends becomes a label as it is.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace seedd::metrics {

enum class Plane { kControl, kData };

// A request answered on the control channel: `kind` one this daemon serves (else
// "unknown"), `outcome` "ok", "miss", "error", "unauthorized" or "data" (handed
// to the data plane).
void Request(std::string_view kind, std::string_view outcome);
void AuthFailure();
void ConnectionOpened(Plane plane);
void ConnectionClosed(Plane plane);
// `reason`: "max_connections", "address_unauthenticated", "unauthenticated",
// "auth_failures", "addresses", "data_queue_full", "data_per_address".
void ConnectionRefused(std::string_view reason);
void BytesSent(Plane plane, uint64_t bytes);
void BytesReceived(Plane plane, uint64_t bytes);
void ChunkVerified();
void ChunkVerificationFailed();
// `backend`: a store's scheme ("disk", "file", "redis", "s3"); `op`: "get",
// "put", "list", "delete"; `result`: "ok", "miss", "error".
void StoreOperation(std::string_view backend, std::string_view op, std::string_view result);
// A warmup of `kind` that took `seconds`; `source` where its state came from
// ("peer", "store", "local", "computed") or "failed".
void Warmup(std::string_view kind, std::string_view source, double seconds);
// The share of model `model`'s bytes verified by the pull running (1 once done).
void PullProgress(std::string_view model, double ratio);
// The files a warmup installed as `cache` ("compile_cache:triton", a model's
// name...) and how many of them another process opened since.
void InstalledFiles(std::string_view cache, uint64_t installed, uint64_t opened);
// A pull a preheat request started ended: `outcome` "done" or "failed".
void PreheatPull(std::string_view outcome);
// Weight bytes a pull received from sources of another zone (seedd --zone).
void BytesAcrossZones(uint64_t bytes);
// Weight bytes sent from a model this daemon pulled (relayed to the swarm).
void RelayBytesSent(uint64_t bytes);
// An upload thread waited `seconds` to keep within --relay-upload-rate.
void RelayUploadWaited(double seconds);
// The rate relay uploads are held to now, by --relay-upload-rate or by the
// uplink's queueing (0: not paced).
void RelayUploadPace(uint64_t bytes_per_second);

// Every metric in the Prometheus text exposition format (version 0.0.4).
std::string Text();

}  // namespace seedd::metrics
