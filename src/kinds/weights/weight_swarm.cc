// WeightServer's swarm bookkeeping (data_plane.h): a ServerCore per root digest
// (the relays that announced themselves, claims, the tracker's sample), and
// upload slots.
#include <sys/socket.h>

#include <algorithm>
#include <random>

#include "common/mutex.h"
#include "kinds/weights/data_plane.h"
#include "seedd/logging.h"

namespace seedd {

bool WeightServer::Announce(const std::string& root, const std::string& relay,
                            const std::string& session, size_t chunks) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || it->second.chunks() != chunks) {
    it = swarms_.insert_or_assign(root, ServerCore(chunks, options_)).first;
  }
  return it->second.Announce(relay, session, std::chrono::steady_clock::now());
}

std::vector<std::string> WeightServer::Peers(const std::string& root, const std::string& except,
                                             size_t limit) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return {};
  return it->second.Peers(except, limit, rng_, std::chrono::steady_clock::now());
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

void WeightServer::PreemptSlowHolders(std::chrono::steady_clock::time_point now) {
  for (auto& [id, h] : holders_) {
    const auto held = now - h.since;
    if (h.preempted || held < options_.preempt_after) continue;
    const double seconds = std::chrono::duration<double>(held).count();
    const double rate = static_cast<double>(h.sent->load(std::memory_order_relaxed)) / seconds;
    if (rate >= static_cast<double>(options_.relay_min_rate)) continue;
    h.preempted = true;
    ::shutdown(h.fd, SHUT_RDWR);  // its send fails at once and frees the slot
    Logger().warn(
        "weight_data: closed the upload of relay {} ({:.0f} KiB/s after {:.1f} s, below the "
        "{} KiB/s a slot needs) for a relay waiting for a slot",
        h.relay, rate / 1024, seconds, options_.relay_min_rate / 1024);
  }
}

void WeightServer::PreemptForAddress(const std::string& address,
                                     std::chrono::steady_clock::time_point now) {
  if (!options_.fair_addresses) return;
  std::map<std::string, std::vector<SlotHolder*>> by_address;
  for (auto& [id, h] : holders_) {
    if (!h.preempted) by_address[h.address].push_back(&h);
  }
  if (by_address.count(address) != 0) return;  // it has its share already
  std::vector<SlotHolder*>* most = nullptr;
  for (auto& [a, held] : by_address) {
    if (most == nullptr || held.size() > most->size()) most = &held;
  }
  if (most == nullptr || most->size() < 2) return;
  SlotHolder* newest = nullptr;
  for (SlotHolder* h : *most) {
    if (now - h->since < options_.preempt_after) continue;
    if (newest == nullptr || h->since > newest->since) newest = h;
  }
  if (newest == nullptr) return;
  newest->preempted = true;
  ::shutdown(newest->fd, SHUT_RDWR);  // its send fails at once and frees the slot
  Logger().warn(
      "weight_data: closed the upload of relay {} from {}, which holds {} upload slots, for a "
      "relay from {}, which holds none",
      newest->relay, newest->address, most->size(), address);
}

bool WeightServer::TakeSlot(const std::string& relay, const std::string& address, bool waiting,
                            int fd, std::shared_ptr<std::atomic<uint64_t>> sent, uint64_t* holder) {
  MutexLock lock(slots_mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = now + options_.own_slot_wait;
  auto mine = [&]() REQUIRES(slots_mu_) {
    auto it = sending_.find(relay);
    return it == sending_.end() ? 0 : it->second;
  };
  auto take = [&]() REQUIRES(slots_mu_) {
    ++sending_[relay];
    ++relay_sends_;
    *holder = ++next_holder_;
    holders_.emplace(*holder,
                     SlotHolder{relay, address, fd, std::chrono::steady_clock::now(), sent});
    return true;
  };
  const bool free = relay_sends_ < options_.upload_slots;
  if (!free && mine() == 0) {
    PreemptSlowHolders(now);
    PreemptForAddress(address, now);
  }
  if (mine() == 0 && free && line_.empty()) return take();
  if (mine() > 0) {
    // A relay's next request waits for its own send to end (the chunks it asks
    // on several connections then leave back to back), behind those in line.
    for (;;) {
      if (mine() == 0 && relay_sends_ < options_.upload_slots && line_.empty()) return take();
      if (slot_freed_.wait_until(lock, deadline) == std::cv_status::timeout) return false;
    }
  }
  // Every slot is another relay's, or promised to those in line.
  const auto window = 2 * options_.busy_retry;
  if (turned_away_.size() > 64) {
    std::erase_if(turned_away_, [&](const auto& t) { return now - t.second > window; });
  }
  auto away = turned_away_.find(relay);
  const bool recently = away != turned_away_.end() && now - away->second <= window;
  if (!waiting || !recently ||
      line_.size() >= static_cast<size_t>(std::max(options_.upload_slots, 1))) {
    turned_away_.insert_or_assign(relay, now);
    return false;
  }
  turned_away_.erase(away);
  const uint64_t ticket = next_ticket_++;
  line_.push_back(ticket);
  bool got = false;
  for (;;) {
    if (line_.front() == ticket && relay_sends_ < options_.upload_slots) {
      got = true;
      break;
    }
    if (slot_freed_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  line_.erase(std::find(line_.begin(), line_.end(), ticket));
  slot_freed_.notify_all();  // the next in line, or a relay's own request
  if (!got) {
    turned_away_.insert_or_assign(relay, std::chrono::steady_clock::now());
    return false;
  }
  waited_in_line_.fetch_add(1, std::memory_order_relaxed);
  return take();
}

void WeightServer::ReleaseSlot(const std::string& relay, uint64_t holder) {
  MutexLock lock(slots_mu_);
  holders_.erase(holder);
  auto it = sending_.find(relay);
  if (it == sending_.end()) return;
  if (--it->second == 0) sending_.erase(it);
  --relay_sends_;
  slot_freed_.notify_all();
}

}  // namespace seedd
