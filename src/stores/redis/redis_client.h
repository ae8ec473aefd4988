// A small pooled hiredis client shared by the Redis store and the swarm
// registry: redis://[[user]:password@]host:port[/db][?prefix=P&ttl=SECONDS&timeout_ms=N].
// A connection that fails is dropped and the command retried once on a fresh
// one, so a restarted server is picked up.
//
// Thread safety: Command from any thread.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "seedd/status.h"

namespace seedd {

struct RedisConfig {
  std::string host;
  uint16_t port = 6379;
  std::optional<std::string> user;
  std::optional<std::string> password;
  int db = 0;
  std::string prefix;
  long long ttl_s = 0;  // 0: no expiry
  int timeout_ms = 2000;
};

Result<RedisConfig> ParseRedisUrl(std::string_view url);

struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

class RedisClient {
 public:
  explicit RedisClient(RedisConfig config) : config_(std::move(config)) {}
  const RedisConfig& config() const { return config_; }
  // "host:port/db".
  std::string Where() const;
  // Runs one command on a pooled connection.
  Result<RedisReply> Command(const std::vector<std::string_view>& args);
  // An error reply, or a reply of a type `cmd` does not return, as a Status.
  static Status Unexpected(const char* cmd, const redisReply* reply);

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  using Context = std::unique_ptr<redisContext, ContextDeleter>;
  Result<Context> Connect() const;
  static RedisReply Run(redisContext* c, const std::vector<std::string_view>& args);

  static constexpr size_t kMaxIdle = 8;
  const RedisConfig config_;
  Mutex mu_;
  std::vector<Context> idle_ GUARDED_BY(mu_);
};

}  // namespace seedd
