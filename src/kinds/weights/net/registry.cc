#include "kinds/weights/net/registry.h"

#include <algorithm>
#include <map>
#include <random>

#include "common/mutex.h"
#include "kinds/weights/net/weight_server.h"
#include "seedd/logging.h"
#include "seedd/seed_config.h"
#include "stores/redis/redis_client.h"

namespace seedd {

int64_t SwarmRegistry::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<std::shared_ptr<SwarmRegistry>> SwarmRegistry::Open(std::string_view url) {
  if (url.rfind("redis://", 0) != 0) {
    return Status::InvalidArgument("a registry is a redis:// URL, not '" + std::string(url) + "'");
  }
  Result<RedisConfig> config = ParseRedisUrl(url);
  if (!config.ok()) return config.status();
  auto client = std::make_unique<RedisClient>(std::move(*config));
  Result<RedisReply> pong = client->Command({"PING"});
  if (!pong.ok()) return pong.status();
  return std::shared_ptr<SwarmRegistry>(new SwarmRegistry(std::move(client)));
}

SwarmRegistry::SwarmRegistry(std::unique_ptr<RedisClient> client) : client_(std::move(client)) {}
SwarmRegistry::~SwarmRegistry() = default;

std::string SwarmRegistry::Describe() const { return "redis://" + client_->Where(); }

std::string SwarmRegistry::Named(const std::string& name) const {
  return client_->config().prefix + "seedd:" + name;
}

std::string SwarmRegistry::Key(const std::string& root) const {
  return client_->config().prefix + "seedd:swarm:" + root;
}

Status SwarmRegistry::Announce(const std::string& root, const std::string& addr,
                               std::chrono::milliseconds ttl) {
  const std::string key = Key(root);
  const std::string expiry = std::to_string(NowMs() + ttl.count());
  Result<RedisReply> added = client_->Command({"ZADD", key, expiry, addr});
  if (!added.ok()) return added.status();
  if ((*added)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("ZADD", added->get());
  const std::string ms = std::to_string(ttl.count());
  Result<RedisReply> expire = client_->Command({"PEXPIRE", key, ms});
  if (!expire.ok()) return expire.status();
  return Status::Ok();
}

Result<bool> SwarmRegistry::Claim(const std::string& name, const std::string& holder,
                                  std::chrono::milliseconds ttl) {
  Result<RedisReply> r =
      client_->Command({"SET", Named(name), holder, "NX", "PX", std::to_string(ttl.count())});
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_NIL) return false;
  if ((*r)->type != REDIS_REPLY_STATUS) return RedisClient::Unexpected("SET", r->get());
  return true;
}

Result<bool> SwarmRegistry::Renew(const std::string& name, const std::string& holder,
                                  std::chrono::milliseconds ttl) {
  // Compare and extend in one step: a lapsed claim taken by another stays theirs.
  static constexpr std::string_view kScript =
      "if redis.call('GET', KEYS[1]) == ARGV[1] then "
      "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
  Result<RedisReply> r =
      client_->Command({"EVAL", kScript, "1", Named(name), holder, std::to_string(ttl.count())});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("EVAL", r->get());
  return (*r)->integer == 1;
}

Status SwarmRegistry::Release(const std::string& name, const std::string& holder) {
  static constexpr std::string_view kScript =
      "if redis.call('GET', KEYS[1]) == ARGV[1] then "
      "return redis.call('DEL', KEYS[1]) else return 0 end";
  Result<RedisReply> r = client_->Command({"EVAL", kScript, "1", Named(name), holder});
  return r.ok() ? Status::Ok() : r.status();
}

Status SwarmRegistry::Put(const std::string& name, const std::string& value,
                          std::chrono::milliseconds ttl) {
  Result<RedisReply> r =
      client_->Command({"SET", Named(name), value, "PX", std::to_string(ttl.count())});
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::optional<std::string>> SwarmRegistry::Get(const std::string& name, size_t max_bytes) {
  Result<RedisReply> r = client_->Command({"GET", Named(name)});
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if ((*r)->type != REDIS_REPLY_STRING || (*r)->len > max_bytes) {
    return RedisClient::Unexpected("GET", r->get());
  }
  return std::optional<std::string>(std::string((*r)->str, (*r)->len));
}

Result<bool> SwarmRegistry::Exists(const std::string& name) {
  Result<RedisReply> r = client_->Command({"EXISTS", Named(name)});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("EXISTS", r->get());
  return (*r)->integer > 0;
}

Status SwarmRegistry::Delete(const std::string& name) {
  Result<RedisReply> r = client_->Command({"DEL", Named(name)});
  return r.ok() ? Status::Ok() : r.status();
}

Status SwarmRegistry::Append(const std::string& name, const std::vector<std::string>& values,
                             std::chrono::milliseconds ttl) {
  if (values.empty()) return Status::Ok();
  const std::string key = Named(name);
  std::vector<std::string_view> argv = {"RPUSH", key};
  for (const std::string& v : values) argv.push_back(v);
  Result<RedisReply> pushed = client_->Command(argv);
  if (!pushed.ok()) return pushed.status();
  Result<RedisReply> expire = client_->Command({"PEXPIRE", key, std::to_string(ttl.count())});
  return expire.ok() ? Status::Ok() : expire.status();
}

Result<std::vector<std::string>> SwarmRegistry::Range(const std::string& name, size_t from,
                                                      size_t max, size_t max_bytes) {
  std::vector<std::string> values;
  if (max == 0) return values;
  Result<RedisReply> r = client_->Command(
      {"LRANGE", Named(name), std::to_string(from), std::to_string(from + max - 1)});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_ARRAY) return RedisClient::Unexpected("LRANGE", r->get());
  for (size_t i = 0; i < (*r)->elements && i < max; ++i) {
    const redisReply* e = (*r)->element[i];
    if (e->type != REDIS_REPLY_STRING || e->len > max_bytes) break;
    values.emplace_back(e->str, e->len);
  }
  return values;
}

Result<std::vector<std::string>> SwarmRegistry::Holders(const std::string& root,
                                                        const std::string& except, size_t limit) {
  const std::string key = Key(root);
  const std::string now = std::to_string(NowMs());
  Result<RedisReply> pruned = client_->Command({"ZREMRANGEBYSCORE", key, "-inf", "(" + now});
  if (!pruned.ok()) return pruned.status();
  const std::string most = std::to_string(kMaxHolders);
  Result<RedisReply> r =
      client_->Command({"ZRANGE", key, now, "+inf", "BYSCORE", "LIMIT", "0", most});
  if (!r.ok()) return r.status();
  const redisReply* reply = r->get();
  if (reply->type != REDIS_REPLY_ARRAY) return RedisClient::Unexpected("ZRANGE", reply);
  std::vector<std::string> holders;
  for (size_t i = 0; i < reply->elements && i < kMaxHolders; ++i) {
    const redisReply* e = reply->element[i];
    if (e->type != REDIS_REPLY_STRING || e->len > 300) continue;
    std::string addr(e->str, e->len);
    if (addr == except || !ParseHostPort(addr).ok()) continue;
    holders.push_back(std::move(addr));
  }
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::shuffle(holders.begin(), holders.end(), rng);
  if (holders.size() > limit) holders.resize(limit);
  return holders;
}

Status SwarmRegistry::PutHost(const std::string& addr, const std::string& json,
                              std::chrono::milliseconds ttl) {
  const std::string& prefix = client_->config().prefix;
  Result<RedisReply> set = client_->Command(
      {"SET", prefix + "seedd:host:" + addr, json, "PX", std::to_string(ttl.count())});
  if (!set.ok()) return set.status();
  Result<RedisReply> added = client_->Command(
      {"ZADD", prefix + "seedd:hosts", std::to_string(NowMs() + ttl.count()), addr});
  if (!added.ok()) return added.status();
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> SwarmRegistry::Hosts(size_t max_bytes) {
  const std::string& prefix = client_->config().prefix;
  const std::string key = prefix + "seedd:hosts";
  const std::string now = std::to_string(NowMs());
  Result<RedisReply> pruned = client_->Command({"ZREMRANGEBYSCORE", key, "-inf", "(" + now});
  if (!pruned.ok()) return pruned.status();
  Result<RedisReply> r = client_->Command(
      {"ZRANGE", key, now, "+inf", "BYSCORE", "LIMIT", "0", std::to_string(kMaxHosts)});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_ARRAY) return RedisClient::Unexpected("ZRANGE", r->get());
  std::vector<std::string> addrs;
  for (size_t i = 0; i < (*r)->elements && i < kMaxHosts; ++i) {
    const redisReply* e = (*r)->element[i];
    if (e->type != REDIS_REPLY_STRING || e->len > 300) continue;
    std::string addr(e->str, e->len);
    if (ParseHostPort(addr).ok()) addrs.push_back(std::move(addr));
  }
  std::vector<std::pair<std::string, std::string>> hosts;
  if (addrs.empty()) return hosts;
  std::vector<std::string> keys;
  for (const std::string& a : addrs) keys.push_back(prefix + "seedd:host:" + a);
  std::vector<std::string_view> args = {"MGET"};
  args.insert(args.end(), keys.begin(), keys.end());
  Result<RedisReply> got = client_->Command(args);
  if (!got.ok()) return got.status();
  if ((*got)->type != REDIS_REPLY_ARRAY || (*got)->elements != addrs.size()) {
    return RedisClient::Unexpected("MGET", got->get());
  }
  for (size_t i = 0; i < addrs.size(); ++i) {
    const redisReply* e = (*got)->element[i];
    if (e->type != REDIS_REPLY_STRING || e->len > max_bytes) continue;
    hosts.emplace_back(addrs[i], std::string(e->str, e->len));
  }
  std::sort(hosts.begin(), hosts.end());
  return hosts;
}

Status SwarmRegistry::AddPreheat(const std::string& id, const std::string& json) {
  Result<RedisReply> r =
      client_->Command({"HSET", client_->config().prefix + "seedd:preheat", id, json});
  if (!r.ok()) return r.status();
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> SwarmRegistry::Preheats() {
  const std::string key = client_->config().prefix + "seedd:preheat";
  Result<RedisReply> n = client_->Command({"HLEN", key});
  if (!n.ok()) return n.status();
  if ((*n)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("HLEN", n->get());
  if ((*n)->integer > static_cast<long long>(kMaxPreheats)) {
    return Status::ResourceExhausted("the registry holds " + std::to_string((*n)->integer) +
                                     " preheat requests, more than " +
                                     std::to_string(kMaxPreheats));
  }
  Result<RedisReply> r = client_->Command({"HGETALL", key});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_ARRAY) return RedisClient::Unexpected("HGETALL", r->get());
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i + 1 < (*r)->elements && out.size() < kMaxPreheats; i += 2) {
    const redisReply* k = (*r)->element[i];
    const redisReply* v = (*r)->element[i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || k->len > 64 ||
        v->len > 4096) {
      continue;
    }
    out.emplace_back(std::string(k->str, k->len), std::string(v->str, v->len));
  }
  return out;
}

Status SwarmRegistry::DropPreheat(const std::string& id) {
  const std::string& prefix = client_->config().prefix;
  Result<RedisReply> r = client_->Command({"HDEL", prefix + "seedd:preheat", id});
  if (!r.ok()) return r.status();
  Result<RedisReply> d = client_->Command({"DEL", prefix + "seedd:preheat:" + id});
  if (!d.ok()) return d.status();
  return Status::Ok();
}

Result<bool> SwarmRegistry::TakePlace(const std::string& id, const std::string& holder,
                                      uint64_t places, std::chrono::milliseconds ttl) {
  static constexpr std::string_view kScript =
      "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end "
      "if tonumber(ARGV[2]) > 0 and redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then "
      "return 0 end "
      "redis.call('SADD', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1";
  Result<RedisReply> r =
      client_->Command({"EVAL", kScript, "1", client_->config().prefix + "seedd:preheat:" + id,
                        holder, std::to_string(places), std::to_string(ttl.count())});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("EVAL", r->get());
  return (*r)->integer == 1;
}

RegistryAnnouncer::RegistryAnnouncer(std::shared_ptr<SwarmRegistry> registry,
                                     std::shared_ptr<WeightServer> server, std::string addr,
                                     std::chrono::milliseconds ttl)
    : registry_(std::move(registry)),
      server_(std::move(server)),
      addr_(std::move(addr)),
      ttl_(ttl),
      thread_([this] { Loop(); }) {}

RegistryAnnouncer::~RegistryAnnouncer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void RegistryAnnouncer::Loop() {
  std::map<std::string, std::chrono::steady_clock::time_point> announced;  // root → when
  bool failing = false;
  MutexLock lock(mu_);
  while (!stop_) {
    lock.Unlock();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& model : server_->Models()) {
      const std::string& root = model->manifest.root_digest;
      auto it = announced.find(root);
      if (it != announced.end() && now - it->second < ttl_ / 3) continue;
      Status st = registry_->Announce(root, addr_, ttl_);
      if (!st.ok()) {
        if (!failing) {
          Logger().warn("Registry {}: cannot announce {} ({}): {}; retrying", registry_->Describe(),
                        model->manifest.model, root, st.message());
        }
        failing = true;
        break;
      }
      if (failing) Logger().info("Registry {}: announcing again", registry_->Describe());
      failing = false;
      announced[root] = now;
    }
    lock.Lock();
    // A model published meanwhile (a pull's staging copy) is announced within a second.
    stop_cv_.wait_for(lock, std::chrono::seconds(1), [this]() REQUIRES(mu_) { return stop_; });
  }
}

}  // namespace seedd
