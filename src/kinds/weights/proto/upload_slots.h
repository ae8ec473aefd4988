// A server's upload slots as a sans-I/O core: which chunk request to a relay is
// sent now, which waits and for what, which is answered "busy", and which slot
// holder loses its slot to whom. Time comes in as arguments; the driver does the
// waiting and the sending. The data-plane server (weight_server.h) keeps one
// under its slots lock, each connection's thread waiting on a condition
// variable until its request is granted or its wait ends; the simulator
// (bench/swarm) keeps one per host.
//
// The rules:
//  - upload_slots chunks are sent to relays at once (fetchers that do not relay
//    take no slot). A relay holds one slot at a time: its next request (a chunk
//    asked ahead, or on another connection) waits for its own send to end, up to
//    own_slot_wait, so one that stops reading holds one slot, not all.
//  - Beyond the slots a relay is answered "busy", except a relay with nothing
//    arriving ("waiting" requests) that was turned away within two busy_retry
//    times: it waits in line, up to own_slot_wait, for the next free slot, ahead
//    of the next request of a relay whose send just ended. Otherwise those
//    holding slots keep them with requests sent ahead, and a newcomer is turned
//    away for as long as they fetch (simulated, 1,000 hosts with 10% joining
//    late: late joiners p99 1.43x the bound, 1.24x with the line). At most
//    line_per_slot x upload_slots wait in line.
//  - When every slot is taken and a relay holding none asks: a holder slower
//    than relay_min_rate after preempt_after loses its slot (one that stops
//    reading, or a name announced only to hold a slot); and with
//    fair_addresses, the address holding the most slots (two or more) loses its
//    newest held for preempt_after, if the asker's address holds none (relay
//    names are claimed by peers, their addresses are not).
//
// Thread safety: none; the driver serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kinds/weights/proto/server_core.h"

namespace seedd {

class UploadSlots {
 public:
  // A request that holds or waits for a slot.
  using Id = uint64_t;

  enum class Verdict {
    kSend,  // the slot is held: send, then Release
    kBusy,  // answer "busy" (retry after busy_retry)
    kWait,  // wait until Granted(id), or until own_slot_wait passes: then GiveUp
  };
  // A slot holder to cut off: its connection is closed, its send fails and
  // releases the slot.
  struct Preempted {
    Id id;
    std::string relay;
    std::string address;
    bool slow;                 // below relay_min_rate; else for fair_addresses
    double rate;               // bytes/s, when slow
    double seconds;            // held for, when slow
    size_t address_holds = 0;  // slots its address held, when not slow
  };
  struct Answer {
    Verdict verdict = Verdict::kBusy;
    Id id = 0;             // with kSend and kWait
    bool in_line = false;  // with kWait: in line, else for the relay's own send to end
    std::vector<Preempted> preempt;
  };

  explicit UploadSlots(const SwarmPolicy& policy) : policy_(policy) {}

  // A chunk request from `relay` at `address` (the peer's, IPv6 by /64);
  // `waiting`: nothing is arriving at it. `sent(id)` is how many bytes slot
  // holder `id` has sent of its chunk (asked only to judge preemption).
  Answer Ask(const std::string& relay, const std::string& address, bool waiting,
             ServeClock::time_point now, const std::function<uint64_t(Id)>& sent);
  // Whether waiting request `id` holds a slot now (granted by a Release or a
  // GiveUp).
  bool Granted(Id id) const { return holders_.count(id) != 0; }
  // Waiting request `id` stops waiting (its own_slot_wait passed, or its
  // connection ended): true when it holds a slot after all (send, then
  // Release), false when it is answered "busy". *granted lists the requests
  // that hold a slot because of it.
  bool GiveUp(Id id, ServeClock::time_point now, std::vector<Id>* granted = nullptr);
  // Holder `id`'s send ended: the requests that hold a slot because of it (in
  // line first, then the relays' own next requests, oldest first).
  std::vector<Id> Release(Id id, ServeClock::time_point now);

  int sending() const { return sends_; }
  size_t in_line() const { return line_.size(); }
  // Requests that waited in line and got a slot.
  uint64_t waited_in_line() const { return waited_in_line_; }

 private:
  struct Holder {
    std::string relay;
    std::string address;
    ServeClock::time_point since;
    bool preempted = false;
  };
  struct Waiter {
    std::string relay;
    std::string address;
    bool in_line;  // else for the relay's own send to end
  };
  int Mine(const std::string& relay) const {
    auto it = sending_.find(relay);
    return it == sending_.end() ? 0 : it->second;
  }
  bool Free() const { return policy_.upload_slots <= 0 || sends_ < policy_.upload_slots; }
  void Take(Id id, const std::string& relay, const std::string& address,
            ServeClock::time_point now);
  // Grants free slots to waiters: the line first, then own waiters whose relay
  // holds none, oldest first.
  void GrantFree(ServeClock::time_point now, std::vector<Id>* granted);
  void PreemptSlow(ServeClock::time_point now, const std::function<uint64_t(Id)>& sent,
                   std::vector<Preempted>* out);
  void PreemptForAddress(const std::string& address, ServeClock::time_point now,
                         std::vector<Preempted>* out);

  SwarmPolicy policy_;
  int sends_ = 0;                       // slots held
  std::map<std::string, int> sending_;  // by relay, those it holds
  std::map<Id, Holder> holders_;
  std::map<Id, Waiter> waiters_;  // oldest first (ids grow)
  std::deque<Id> line_;           // of waiters_, first first
  // Relays answered "busy" recently, and when.
  std::map<std::string, ServeClock::time_point> turned_away_;
  Id next_ = 0;
  uint64_t waited_in_line_ = 0;
};

}  // namespace seedd
