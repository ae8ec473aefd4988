// Who holds which model version, in the Redis a fleet already runs for its
// stores (`seedd --registry redis://...`). Daemons announce, for each root
// digest they serve (complete, or verified so far while pulling), their
// data-plane address with a TTL; fetchers take neighbours from it besides the
// relays their seeds name, so a swarm spans several seeds and outlives a seed's
// restart. The seed as tracker stays the default: without a registry nothing
// changes.
//
// Layout: key <prefix>seedd:swarm:<root digest>, a sorted set of HOST:PORT
// scored by the time (ms since the Unix epoch) the entry expires; the key expires
// with its newest entry. What is read back is peer input: at most kMaxHolders
// entries are read, and an entry that is not HOST:PORT is skipped.
//
// Thread safety: SwarmRegistry from any thread; RegistryAnnouncer owns a thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "seedd/status.h"

namespace seedd {

class RedisClient;
class WeightServer;

class SwarmRegistry {
 public:
  static constexpr size_t kMaxHolders = 256;
  // The registry's clock: milliseconds since the Unix epoch (expiry times, the
  // hosts' and preheat requests' times are in it).
  static int64_t NowMs();

  // Connects (a PING) to the redis:// URL.
  static Result<std::shared_ptr<SwarmRegistry>> Open(std::string_view url);
  ~SwarmRegistry();

  // `addr` holds (some of) `root` for the next `ttl`.
  Status Announce(const std::string& root, const std::string& addr, std::chrono::milliseconds ttl);
  // At most `limit` holders of `root` whose entries have not expired, at random,
  // `except` left out.
  Result<std::vector<std::string>> Holders(const std::string& root, const std::string& except,
                                           size_t limit);
  std::string Describe() const;

  // Small shared facts beside the swarms (keys <prefix>seedd:NAME): which daemon
  // goes upstream for a model version, and what it became. Values from the
  // registry are peer input: the caller validates them.
  // NAME for `holder` for `ttl`, unless another holds it: true when this one does.
  Result<bool> Claim(const std::string& name, const std::string& holder,
                     std::chrono::milliseconds ttl);
  // Extends `holder`'s claim on NAME: false when it lapsed (another may hold it).
  Result<bool> Renew(const std::string& name, const std::string& holder,
                     std::chrono::milliseconds ttl);
  // Drops `holder`'s claim on NAME (not another's).
  Status Release(const std::string& name, const std::string& holder);
  Status Put(const std::string& name, const std::string& value, std::chrono::milliseconds ttl);
  // NAME's value (at most `max_bytes`: a longer one is an error), or nullopt.
  Result<std::optional<std::string>> Get(const std::string& name, size_t max_bytes = 1024);
  // Whether NAME has a value (none of it is read).
  Result<bool> Exists(const std::string& name);
  // A list that grows: `values` appended to NAME, which lives `ttl` from now;
  // and up to `max` of its values from the `from`th on (each at most
  // `max_bytes`: a longer one ends what is returned). A reader asks only for
  // what it has not read yet.
  Status Append(const std::string& name, const std::vector<std::string>& values,
                std::chrono::milliseconds ttl);
  // NAME gone (a list begun again).
  Status Delete(const std::string& name);
  Result<std::vector<std::string>> Range(const std::string& name, size_t from, size_t max,
                                         size_t max_bytes);

  // The fleet's hosts: each daemon's status (a JSON object) under
  // <prefix>seedd:host:<addr> for `ttl`, listed in the sorted set
  // <prefix>seedd:hosts by expiry.
  static constexpr size_t kMaxHosts = 4096;
  Status PutHost(const std::string& addr, const std::string& json, std::chrono::milliseconds ttl);
  // Live hosts, at most kMaxHosts: (HOST:PORT, its status text of at most
  // `max_bytes`; longer ones are skipped).
  Result<std::vector<std::pair<std::string, std::string>>> Hosts(size_t max_bytes = 64 << 10);
  // Preheat requests: the hash <prefix>seedd:preheat (id -> JSON text); the
  // hosts that took a place of request `id` in the set <prefix>seedd:preheat:<id>.
  static constexpr size_t kMaxPreheats = 64;
  Status AddPreheat(const std::string& id, const std::string& json);
  // At most kMaxPreheats requests (id, text of at most 4 KiB).
  Result<std::vector<std::pair<std::string, std::string>>> Preheats();
  Status DropPreheat(const std::string& id);
  // One of `places` places (0: no bound) of request `id` taken for `holder`,
  // atomically: true when `holder` has one (now or before).
  Result<bool> TakePlace(const std::string& id, const std::string& holder, uint64_t places,
                         std::chrono::milliseconds ttl);

 private:
  explicit SwarmRegistry(std::unique_ptr<RedisClient> client);
  std::string Key(const std::string& root) const;
  // <prefix>seedd:NAME, the key of a named value (claims, records, lists).
  std::string Named(const std::string& name) const;
  std::unique_ptr<RedisClient> client_;
};

// Announces every model `server` serves under `addr`, at once when it appears
// and then every ttl/3, until destroyed. A registry that is down is logged (once
// per outage) and retried.
class RegistryAnnouncer {
 public:
  RegistryAnnouncer(std::shared_ptr<SwarmRegistry> registry, std::shared_ptr<WeightServer> server,
                    std::string addr, std::chrono::milliseconds ttl = std::chrono::seconds(30));
  ~RegistryAnnouncer();

 private:
  void Loop();

  const std::shared_ptr<SwarmRegistry> registry_;
  const std::shared_ptr<WeightServer> server_;
  const std::string addr_;
  const std::chrono::milliseconds ttl_;
  Mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace seedd
