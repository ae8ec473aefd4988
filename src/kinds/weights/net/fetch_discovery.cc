// How a Fetch (fetch.h) finds its peers: seeds given by name, relays from the
// registry and from state responses, what neighbours say they have, and the
// neighbour set filled from the candidates.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include "common/mutex.h"
#include "kinds/weights/net/fetch.h"
#include "kinds/weights/net/registry.h"
#include "seedd/fleet.h"
#include "seedd/logging.h"
#include "transport/client.h"

namespace seedd {
void Fetch::AddSeeds(const std::vector<HostPort>& given, bool first) {
  std::vector<HostPort> seeds;
  for (const HostPort& s : given) {
    unsigned char literal[sizeof(in6_addr)];
    if (::inet_pton(AF_INET, s.host.c_str(), literal) == 1 ||
        ::inet_pton(AF_INET6, s.host.c_str(), literal) == 1) {
      seeds.push_back(s);
      continue;
    }
    Result<std::vector<HostPort>> all = ResolveAll(s);
    if (!all.ok() || all->size() == 1) {
      seeds.push_back(s);  // connecting says what is wrong with it
      continue;
    }
    if (first) {
      Logger().info("weight_data: source {} resolves to {} addresses; each is a seed", s.ToString(),
                    all->size());
    }
    seeds.insert(seeds.end(), all->begin(), all->end());
  }
  MutexLock lock(mu_);
  for (const HostPort& s : seeds) AddSourceLocked(s, true);
  FillNeighboursLocked();
}

std::vector<HostPort> Fetch::AskRegistry() {
  std::vector<HostPort> relays;
  if (options_.registry == nullptr) return relays;
  Result<std::vector<std::string>> holders =
      options_.registry->Holders(m_.root_digest, options_.relay, 2 * options_.max_neighbours);
  if (!holders.ok()) {
    if (!registry_failing_) {
      Logger().warn("weight_data: registry {}: {}", options_.registry->Describe(),
                    holders.status().message());
    }
    registry_failing_ = true;
    return relays;
  }
  registry_failing_ = false;
  for (const std::string& text : *holders) {
    Result<HostPort> peer = ParseHostPort(text);
    if (peer.ok()) relays.push_back(std::move(*peer));
  }
  return relays;
}

void Fetch::AddRelays(const std::vector<HostPort>& relays) {
  MutexLock lock(mu_);
  for (const HostPort& r : relays) AddSourceLocked(r, false);
  FillNeighboursLocked();
}

void Fetch::AddSourceLocked(const HostPort& addr, bool seed,
                            const std::optional<std::string>& zone) {
  const std::string name = addr.ToString();
  if (name == options_.relay) return;
  std::optional<PeerId> id = core_.AddSource(name, seed, zone);
  if (!id) return;
  auto source = std::make_unique<Source>();
  source->addr = addr;
  source->name = name;
  source->seed = seed;
  source->id = *id;
  sources_.push_back(std::move(source));
  if (!seed) stats_->peers.push_back(name);
}

void Fetch::ApplyState(Source* source, std::string_view body) {
  const size_t n = m_.chunks.size();
  std::vector<bool> have(n);
  for (size_t i = 0; i < n; ++i) {
    have[i] = (static_cast<unsigned char>(body[i / 8]) & (0x80 >> (i % 8))) != 0;
  }
  MutexLock lock(mu_);
  core_.OnState(source->id, have);
  for (size_t pos = (n + 7) / 8; pos < body.size();) {
    size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    // "HOST:PORT" or, to a fetcher that said its zone, "HOST:PORT ZONE".
    std::string_view line = body.substr(pos, end - pos);
    std::optional<std::string> zone;
    if (size_t space = line.find(' '); space != std::string_view::npos) {
      if (IsZoneName(line.substr(space + 1))) zone = std::string(line.substr(space + 1));
      line = line.substr(0, space);
    }
    Result<HostPort> peer = ParseHostPort(line);
    if (peer.ok()) AddSourceLocked(*peer, false, zone);
    pos = end + 1;
  }
  core_.OnRelaysListed(source->id);
  FillNeighboursLocked();
  WakeAskersLocked();  // what it offers changed
  ended_.notify_all();
}

void Fetch::ApplyHave(Source* source, const std::vector<uint32_t>& chunks, bool complete,
                      uint64_t verified) {
  MutexLock lock(mu_);
  if (complete) {
    core_.OnState(source->id, std::vector<bool>(m_.chunks.size(), true));
  } else {
    // Fallen behind the neighbours: more requests may go out, from any source.
    if (core_.OnVerifiedCount(source->id, verified)) WakeAskersLocked();
    if (chunks.empty()) return;  // nothing it offers changed
    for (uint32_t c : chunks) core_.OnHave(source->id, c);
  }
  // What it offers changes no other source's work, and its own only when it
  // may be asked now: a fleet near its origin's pace hears of each chunk from
  // several neighbours while its requests to relays are at their bound.
  WakeLocked(*source, std::chrono::steady_clock::now());
}

std::chrono::milliseconds Fetch::RelayWait() {
  MutexLock lock(mu_);
  return core_.RelayWait();
}

bool Fetch::WantRelays() {
  MutexLock lock(mu_);
  return core_.WantRelays(std::chrono::steady_clock::now());
}

}  // namespace seedd
