// WeightServer's swarm bookkeeping (data_plane.h): the relays that announced
// themselves per root digest, the tracker's sample of them, claims on chunks
// sent to relays, and upload slots.
#include <sys/socket.h>

#include <algorithm>
#include <random>

#include "common/mutex.h"
#include "kinds/weights/data_plane.h"
#include "seedd/logging.h"

namespace seedd {

int WeightServer::Announce(const std::string& root, const std::string& relay,
                           const std::string& session, size_t chunks) {
  MutexLock lock(mu_);
  Swarm& swarm = swarms_[root];
  if (swarm.claims.size() != chunks) swarm.claims.assign(chunks, Claim{});
  auto it = swarm.ids.find(relay);
  if (it == swarm.ids.end()) {
    if (swarm.addrs.size() >= options_.max_relays) Expire(swarm, std::chrono::steady_clock::now());
    if (swarm.addrs.size() >= options_.max_relays) return -1;
    it = swarm.ids.emplace(relay, static_cast<int>(swarm.addrs.size())).first;
    swarm.addrs.push_back(relay);
    swarm.seen.emplace_back();
    swarm.sessions.push_back(session);
  }
  const int id = it->second;
  if (swarm.sessions[id] != session) {
    // The relay started over (a restart with an empty cache, say): what it was
    // sent before may be gone.
    swarm.sessions[id] = session;
    for (Claim& c : swarm.claims) {
      if (c.holder == id) c = Claim{};
    }
  }
  swarm.seen[id] = std::chrono::steady_clock::now();
  return id;
}

void WeightServer::Expire(Swarm& swarm, std::chrono::steady_clock::time_point now) {
  std::vector<int> id_of(swarm.addrs.size(), -1);  // old id → new id, -1 forgotten
  Swarm kept;
  for (size_t id = 0; id < swarm.addrs.size(); ++id) {
    if (now - swarm.seen[id] >= options_.relay_ttl) continue;
    id_of[id] = static_cast<int>(kept.addrs.size());
    kept.ids.emplace(swarm.addrs[id], id_of[id]);
    kept.addrs.push_back(std::move(swarm.addrs[id]));
    kept.seen.push_back(swarm.seen[id]);
    kept.sessions.push_back(std::move(swarm.sessions[id]));
  }
  kept.claims = std::move(swarm.claims);
  for (Claim& c : kept.claims) {
    if (c.holder >= 0) c.holder = id_of[c.holder];
    if (c.holder < 0) c = Claim{};
  }
  swarm = std::move(kept);
}

std::vector<std::string> WeightServer::Peers(const std::string& root, const std::string& except,
                                             size_t limit) {
  std::vector<std::string> peers;
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return peers;
  Swarm& swarm = it->second;
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> live;
  for (size_t id = 0; id < swarm.addrs.size(); ++id) {
    if (now - swarm.seen[id] < options_.relay_ttl && swarm.addrs[id] != except) {
      live.push_back(static_cast<int>(id));
    }
  }
  if (live.size() > limit) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    std::shuffle(live.begin(), live.end(), rng);
    // Half of those listed (rounded up) are the relays holding the most chunks
    // this server sent (chunks nobody else got from it: they complement any
    // asker); the rest at random. Counted at most once a second per swarm.
    if (now - swarm.held_at >= std::chrono::seconds(1)) {
      swarm.held.assign(swarm.addrs.size(), 0);
      for (const Claim& c : swarm.claims) {
        if (c.holder >= 0 && static_cast<size_t>(c.holder) < swarm.held.size()) {
          ++swarm.held[c.holder];
        }
      }
      swarm.held_at = now;
    }
    auto held = [&](int id) {
      return static_cast<size_t>(id) < swarm.held.size() ? swarm.held[id] : 0u;
    };
    const size_t top = (limit + 1) / 2;
    std::partial_sort(live.begin(), live.begin() + static_cast<long>(top), live.end(),
                      [&](int a, int b) { return held(a) > held(b); });
    std::shuffle(live.begin() + static_cast<long>(top), live.end(), rng);
    live.resize(limit);
  }
  for (int id : live) peers.push_back(swarm.addrs[id]);
  return peers;
}

uint32_t WeightServer::ClaimChunk(const std::string& root, int peer, uint32_t index,
                                  uint32_t* aux) {
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || index >= it->second.claims.size()) return kChunkOk;
  Swarm& swarm = it->second;
  Claim& claim = swarm.claims[index];
  const auto now = std::chrono::steady_clock::now();
  if (claim.holder >= 0 && claim.holder != peer &&
      now - swarm.seen[claim.holder] < options_.relay_ttl) {
    // A live relay has it (or is getting it): the asker should fetch it there.
    if (claim.sending) {
      *aux = 0xffffffff;
    } else {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - claim.sent_at).count();
      *aux = static_cast<uint32_t>(std::min<int64_t>(ms, 0xfffffffe));
    }
    return kChunkClaimed;
  }
  if (peer >= 0) claim = Claim{peer, true, {}};
  return kChunkOk;
}

void WeightServer::EndSend(const std::string& root, int peer, uint32_t index, bool complete) {
  if (peer < 0) return;
  MutexLock lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || index >= it->second.claims.size()) return;
  Claim& claim = it->second.claims[index];
  if (claim.holder != peer || !claim.sending) return;
  if (complete) {
    claim.sending = false;
    claim.sent_at = std::chrono::steady_clock::now();
  } else {
    claim = Claim{};  // it never arrived: anyone may ask for it again
  }
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
