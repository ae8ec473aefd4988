// The serving side of the weight data plane (the protocol: data_plane.h): the
// models served, each chunk sent with sendfile from below the model's directory,
// the bounds on peers, and the upload slots relays take turns for.
//
// Thread safety: WeightServer serves many connections at once and Publish may be
// called meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/unique_fd.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/files/model_index.h"
#include "kinds/weights/net/relay_pacing.h"
#include "kinds/weights/proto/records.h"
#include "kinds/weights/proto/server_core.h"
#include "kinds/weights/proto/upload_slots.h"
#include "seedd/status.h"
#include "transport/tls.h"

namespace seedd {

// The data plane's bounds on its peers, and its swarm policy (SwarmPolicy:
// the relays remembered, claims, the tracker's sample).
struct WeightServerOptions : SwarmPolicy {
  std::chrono::milliseconds idle_timeout{60000};  // between requests
  // Each response record and its bytes. The floor is low: a fetcher that reads
  // slowly because its link is shared by many transfers is served; one that
  // reads nothing holds a stream thread until the deadline.
  TransferDeadline send{std::chrono::milliseconds(10000), 16 * 1024};
  // Bytes per second this server sends of a model that this host is itself still
  // pulling (0: no limit). Set a little below the host's uplink: a full uplink
  // queues the host's own chunk requests and TCP acknowledgements behind its
  // uploads, and its own pull slows to a fraction of its downlink. Once the
  // pull completes, the model is served at full speed.
  uint64_t relay_upload_rate = 0;
  // Below that cap, how the server paces them by itself (RelayPacing,
  // proto/upload_pacer.h): from the uplink's capacity its uploads measure,
  // from the queueing they meet, or not at all (only the cap).
  RelayPacingMode relay_pacing = RelayPacingMode::kOff;
  // Called once per connection and file when a chunk of a model's file (its
  // manifest path) is sent to a fetcher that does not relay (an engine's
  // seedctl pull or seedd.pull: one that announces no relay address): the
  // daemon counts the file as used by the engine. On the stream thread.
  std::function<void(const std::string& model, const std::string& file)> served_to_client;
  // This host's zone (seedd --zone; empty: none), said to every fetcher in the
  // data connection's answer so that fetchers of other zones ask it only for
  // what their zone lacks.
  std::string zone;
};

// Files a manifest request stats to check that a model is unchanged (see
// WeightServer::CheckUnchanged).
inline constexpr size_t kUnchangedSweepFiles = 1024;

class WeightServer {
 public:
  explicit WeightServer(std::vector<ServedModel> models, WeightServerOptions options = {});
  // The stream handler of kind weight_data. REQUIRES: `request` authenticated.
  void Serve(Conn& conn, const Json& request);
  // Serves `model` from now on, in place of any model of the same name.
  void Publish(ServedModel model);
  std::shared_ptr<const ServedModel> FindModel(std::string_view name) const;
  // FailedPrecondition naming a file of `model` that changed on disk since it
  // was indexed (its chunk digests no longer describe it), for a manifest not
  // to be handed out. A stat per file: every file of a model of at most
  // kUnchangedSweepFiles, and that many per call in turn of a larger one (a
  // manifest request then costs the same whatever the model's size); a file
  // the data path found changed fails every call from then on.
  Status CheckUnchanged(const ServedModel& model);
  // Every model served now, by name.
  std::vector<std::shared_ptr<const ServedModel>> Models() const;
  // The relays that announced themselves for `root` recently, but `except`: at
  // most `limit`, half of them those holding the most chunks this server sent
  // (they complement any asker), the rest at random.
  std::vector<std::string> Peers(const std::string& root, const std::string& except,
                                 size_t limit = SIZE_MAX);
  // The same with their zones, those of `zone` first (ServerCore::ListPeers).
  std::vector<ListedRelay> ListPeers(const std::string& root, const std::string& except,
                                     size_t limit, const std::string& zone);
  // How many relays a state response or a manifest lists at most.
  size_t max_peers_listed() const { return options_.max_peers_listed; }
  // Chunk bytes sent so far, over every connection.
  uint64_t bytes_served() const { return bytes_served_.load(std::memory_order_relaxed); }
  // Chunk requests that waited in line for an upload slot and got one.
  uint64_t waited_in_line() const {
    MutexLock lock(slots_mu_);
    return slots_.waited_in_line();
  }
  // Data connections being served now.
  int connections() const { return connections_.load(std::memory_order_relaxed); }
  // Manifests serialized so far (once per model version published).
  uint64_t manifests_serialized() const {
    return manifests_serialized_.load(std::memory_order_relaxed);
  }

 private:
  // When `bytes` sent from now must have left (options_.send).
  std::chrono::steady_clock::time_point SendBy(uint64_t bytes) const {
    return std::chrono::steady_clock::now() + options_.send.Within(bytes);
  }
  std::shared_ptr<const ServedModel> FindRoot(const std::string& root) const;
  bool Announce(const std::string& root, const std::string& relay, const std::string& session,
                size_t chunks, const std::string& zone);
  // For "SDRN": 0 and a claim for `relay` (when not empty), or 2 and the aux
  // value, and the claim's holder in *holder when not null.
  uint32_t ClaimChunk(const std::string& root, const std::string& relay, uint32_t index,
                      uint32_t* aux, std::string* holder);
  void EndSend(const std::string& root, const std::string& relay, uint32_t index, bool complete);
  // Who is asking on one data connection.
  struct Asker {
    bool peer = false;  // a relay remembered in the swarm: it takes claims
    std::string relay;  // its HOST:PORT (empty: not a relay)
    std::string session;
    std::string zone;  // the zone it said (empty: none)
    bool name_holder = false;
  };
  void ServeRequests(Conn& conn, const std::string& root, std::shared_ptr<const ServedModel> model,
                     const Asker& asker);
  // Answers "SDST" (state) or "SDWT"/"SDWW" (watch from `cursor`, for the
  // chunks in the `wanted` bitmap when not empty); false when the connection is
  // to close. A state lists relays with their zones to an asker that said a zone.
  bool ServeState(Conn& conn, const ServedModel& model, bool watch, uint32_t cursor,
                  const Asker& asker, std::string_view wanted = {});
  // An upload slot for a chunk to `relay` from `address`, by the rules of
  // UploadSlots (proto/upload_slots.h), waiting here when they say wait: false
  // for "busy". The slot is held by the connection `fd`, whose progress `sent`
  // counts (a slow holder may be cut off); *holder names it for ReleaseSlot.
  bool TakeSlot(const std::string& relay, const std::string& address, bool waiting, int fd,
                std::shared_ptr<std::atomic<uint64_t>> sent, uint64_t* holder);
  void ReleaseSlot(uint64_t holder);
  // Logs once per model file that changed since it was indexed.
  void WarnChanged(const ServedModel& model, const std::string& file, const std::string& why);

  const WeightServerOptions options_;
  // The pace of what is sent of a model this host is still pulling; null when
  // neither a cap nor pacing is asked for.
  const std::unique_ptr<RelayPacing> relay_pacing_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const ServedModel>, std::less<>> by_name_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const ServedModel>> by_root_ GUARDED_BY(mu_);
  std::map<std::string, ServerCore> swarms_ GUARDED_BY(mu_);  // by root digest
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  std::set<std::string> warned_ GUARDED_BY(mu_);
  // By root digest: the first changed file found ("PATH: WHY"), and where the
  // next CheckUnchanged of a large model starts.
  std::map<std::string, std::string> changed_ GUARDED_BY(mu_);
  std::map<std::string, size_t> sweep_from_ GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_served_{0};
  std::atomic<int> connections_{0};
  std::atomic<uint64_t> manifests_serialized_{0};
  mutable Mutex slots_mu_;
  std::condition_variable slot_freed_;
  UploadSlots slots_ GUARDED_BY(slots_mu_);
  // By slot request (UploadSlots::Id): the connection to close if it is cut
  // off, and the bytes of its chunk sent so far.
  struct SlotIo {
    int fd;
    std::shared_ptr<std::atomic<uint64_t>> sent;
  };
  std::map<UploadSlots::Id, SlotIo> slot_io_ GUARDED_BY(slots_mu_);
};

}  // namespace seedd
