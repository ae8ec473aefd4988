#include "kinds/weights/proto/upload_slots.h"

#include <algorithm>

namespace seedd {

UploadSlots::Answer UploadSlots::Ask(const std::string& relay, const std::string& address,
                                     bool waiting, ServeClock::time_point now,
                                     const std::function<uint64_t(Id)>& sent) {
  Answer a;
  a.verdict = Verdict::kBusy;
  if (!Free() && Mine(relay) == 0) {
    PreemptSlow(now, sent, &a.preempt);
    PreemptForAddress(address, now, &a.preempt);
  }
  const Id id = ++next_;
  if (Mine(relay) == 0 && Free() && line_.empty()) {
    Take(id, relay, address, now);
    a.verdict = Verdict::kSend;
    a.id = id;
    return a;
  }
  if (Mine(relay) > 0) {
    // The relay's next request waits for its own send to end (the chunks it
    // asks on several connections then leave back to back), behind the line.
    waiters_.emplace(id, Waiter{relay, address, false});
    a.verdict = Verdict::kWait;
    a.id = id;
    return a;
  }
  // Every slot is another relay's, or promised to those in line.
  const auto window = 2 * policy_.busy_retry;
  if (turned_away_.size() > 64) {
    std::erase_if(turned_away_, [&](const auto& t) { return now - t.second > window; });
  }
  auto away = turned_away_.find(relay);
  const bool recently = away != turned_away_.end() && now - away->second <= window;
  if (!waiting || !recently ||
      line_.size() >=
          static_cast<size_t>(std::max(policy_.upload_slots, 1) * policy_.line_per_slot)) {
    turned_away_.insert_or_assign(relay, now);
    return a;
  }
  turned_away_.erase(away);
  waiters_.emplace(id, Waiter{relay, address, true});
  line_.push_back(id);
  a.verdict = Verdict::kWait;
  a.id = id;
  a.in_line = true;
  return a;
}

bool UploadSlots::GiveUp(Id id, ServeClock::time_point now, std::vector<Id>* granted) {
  if (Granted(id)) return true;
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  if (it->second.in_line) {
    line_.erase(std::find(line_.begin(), line_.end(), id));
    turned_away_.insert_or_assign(it->second.relay, now);
  }
  waiters_.erase(it);
  std::vector<Id> ignored;
  GrantFree(now, granted != nullptr ? granted : &ignored);  // the line may be empty now
  return false;
}

std::vector<UploadSlots::Id> UploadSlots::Release(Id id, ServeClock::time_point now) {
  std::vector<Id> granted;
  auto it = holders_.find(id);
  if (it == holders_.end()) return granted;
  auto mine = sending_.find(it->second.relay);
  if (mine != sending_.end() && --mine->second == 0) sending_.erase(mine);
  holders_.erase(it);
  --sends_;
  GrantFree(now, &granted);
  return granted;
}

void UploadSlots::Take(Id id, const std::string& relay, const std::string& address,
                       ServeClock::time_point now) {
  ++sending_[relay];
  ++sends_;
  holders_.emplace(id, Holder{relay, address, now});
}

void UploadSlots::GrantFree(ServeClock::time_point now, std::vector<Id>* granted) {
  while (Free()) {
    Id next = 0;
    if (!line_.empty()) {
      next = line_.front();
      line_.pop_front();
      ++waited_in_line_;
    } else {
      for (const auto& [id, w] : waiters_) {
        if (!w.in_line && Mine(w.relay) == 0) {
          next = id;
          break;
        }
      }
      if (next == 0) return;
    }
    auto it = waiters_.find(next);
    Take(next, it->second.relay, it->second.address, now);
    waiters_.erase(it);
    granted->push_back(next);
  }
}

void UploadSlots::PreemptSlow(ServeClock::time_point now, const std::function<uint64_t(Id)>& sent,
                              std::vector<Preempted>* out) {
  for (auto& [id, h] : holders_) {
    const auto held = now - h.since;
    if (h.preempted || held < policy_.preempt_after) continue;
    const double seconds = std::chrono::duration<double>(held).count();
    const double rate = static_cast<double>(sent(id)) / seconds;
    if (rate >= static_cast<double>(policy_.relay_min_rate)) continue;
    h.preempted = true;
    out->push_back(Preempted{id, h.relay, h.address, true, rate, seconds});
  }
}

void UploadSlots::PreemptForAddress(const std::string& address, ServeClock::time_point now,
                                    std::vector<Preempted>* out) {
  if (!policy_.fair_addresses) return;
  std::map<std::string, std::vector<std::pair<Id, Holder*>>> by_address;
  for (auto& [id, h] : holders_) {
    if (!h.preempted) by_address[h.address].push_back({id, &h});
  }
  if (by_address.count(address) != 0) return;  // it has its share already
  const std::vector<std::pair<Id, Holder*>>* most = nullptr;
  for (const auto& [a, held] : by_address) {
    if (most == nullptr || held.size() > most->size()) most = &held;
  }
  if (most == nullptr || most->size() < 2) return;
  const std::pair<Id, Holder*>* newest = nullptr;
  for (const auto& h : *most) {
    if (now - h.second->since < policy_.preempt_after) continue;
    if (newest == nullptr || h.second->since > newest->second->since) newest = &h;
  }
  if (newest == nullptr) return;
  Holder& h = *newest->second;
  h.preempted = true;
  out->push_back(Preempted{newest->first, h.relay, h.address, false, 0, 0, most->size()});
}

}  // namespace seedd
