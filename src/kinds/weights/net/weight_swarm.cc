// WeightServer's swarm bookkeeping (data_plane.h): a ServerCore per root digest
// (the relays that announced themselves, claims, the tracker's sample), and
// the upload slots (an UploadSlots, its waits done here on a condition variable).
#include <sys/socket.h>

#include <random>

#include "common/mutex.h"
#include "kinds/weights/net/weight_server.h"
#include "seedd/logging.h"

namespace seedd {

bool WeightServer::Announce(const std::string& root, const std::string& relay,
                            const std::string& session, size_t chunks, const std::string& zone) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || it->second.chunks() != chunks) {
    it = swarms_.insert_or_assign(root, ServerCore(chunks, options_)).first;
  }
  return it->second.Announce(relay, session, std::chrono::steady_clock::now(), zone);
}

std::vector<std::string> WeightServer::Peers(const std::string& root, const std::string& except,
                                             size_t limit) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return {};
  return it->second.Peers(except, limit, rng_, std::chrono::steady_clock::now());
}

std::vector<ListedRelay> WeightServer::ListPeers(const std::string& root, const std::string& except,
                                                 size_t limit, const std::string& zone) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return {};
  return it->second.ListPeers(except, limit, rng_, std::chrono::steady_clock::now(), zone);
}

uint32_t WeightServer::ClaimChunk(const std::string& root, const std::string& relay, uint32_t index,
                                  uint32_t* aux, std::string* holder) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return kChunkOk;
  ClaimAnswer a = it->second.Claim(relay, index, std::chrono::steady_clock::now());
  if (a.send) return kChunkOk;
  *aux = a.aux;
  if (holder != nullptr) *holder = std::move(a.holder);
  return kChunkClaimed;
}

void WeightServer::EndSend(const std::string& root, const std::string& relay, uint32_t index,
                           bool complete) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return;
  it->second.EndSend(relay, index, complete, std::chrono::steady_clock::now());
}

bool WeightServer::TakeSlot(const std::string& relay, const std::string& address, bool waiting,
                            int fd, std::shared_ptr<std::atomic<uint64_t>> sent, uint64_t* holder) {
  MutexLock lock(slots_mu_);
  // Called by Ask, under slots_mu_.
  auto sent_by = [this](UploadSlots::Id id) REQUIRES(slots_mu_) -> uint64_t {
    auto it = slot_io_.find(id);
    return it == slot_io_.end() ? 0 : it->second.sent->load(std::memory_order_relaxed);
  };
  UploadSlots::Answer a =
      slots_.Ask(relay, address, waiting, std::chrono::steady_clock::now(), sent_by);
  for (const UploadSlots::Preempted& p : a.preempt) {
    auto it = slot_io_.find(p.id);
    if (it != slot_io_.end()) ::shutdown(it->second.fd, SHUT_RDWR);  // its send fails at once
    if (p.slow) {
      Logger().warn(
          "weight_data: closed the upload of relay {} ({:.0f} KiB/s after {:.1f} s, below the "
          "{} KiB/s a slot needs) for a relay waiting for a slot",
          p.relay, p.rate / 1024, p.seconds, options_.relay_min_rate / 1024);
    } else {
      Logger().warn(
          "weight_data: closed the upload of relay {} from {}, which holds {} upload slots, for a "
          "relay from {}, which holds none",
          p.relay, p.address, p.address_holds, address);
    }
  }
  if (a.verdict == UploadSlots::Verdict::kBusy) return false;
  slot_io_.insert_or_assign(a.id, SlotIo{fd, std::move(sent)});
  const auto deadline = std::chrono::steady_clock::now() + options_.own_slot_wait;
  while (!slots_.Granted(a.id)) {
    if (slot_freed_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
    std::vector<UploadSlots::Id> granted;
    if (slots_.GiveUp(a.id, std::chrono::steady_clock::now(), &granted)) break;
    slot_io_.erase(a.id);
    if (!granted.empty()) slot_freed_.notify_all();
    return false;
  }
  *holder = a.id;
  return true;
}

void WeightServer::ReleaseSlot(uint64_t holder) {
  MutexLock lock(slots_mu_);
  slot_io_.erase(holder);
  if (!slots_.Release(holder, std::chrono::steady_clock::now()).empty()) {
    slot_freed_.notify_all();
  }
}

}  // namespace seedd
