// The Redis store: values are raw bytes under <prefix><key>, on a pooled
// RedisClient (redis_client.h: the URL, reconnects).
#include <algorithm>
#include <vector>

#include "stores/backends.h"
#include "stores/redis/redis_client.h"

namespace seedd {
namespace {

// Escapes glob metacharacters for SCAN MATCH.
std::string GlobEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

class RedisStore final : public ArtifactStore {
 public:
  explicit RedisStore(RedisConfig config) : client_(std::move(config)), config_(client_.config()) {}

  Status Ping() {
    auto r = client_.Command({"PING"});
    if (!r.ok()) return r.status();
    return Status::Ok();
  }

  // At most kMaxSharedValueBytes are read: STRLEN first (0: absent or empty),
  // then GETRANGE up to one byte past the limit (a value that grew meanwhile is
  // still read bounded, and refused).
  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    const std::string k = config_.prefix + key.ToString();
    auto len = client_.Command({"STRLEN", k});
    if (!len.ok()) return len.status();
    if ((*len)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("STRLEN", len->get());
    auto too_large = [&] {
      return Status::ResourceExhausted(Describe() + ": " + key.ToString() +
                                       ": the value is larger than " +
                                       std::to_string(kMaxSharedValueBytes >> 20) +
                                       " MiB, the most a shared store's value may be");
    };
    if (static_cast<uint64_t>((*len)->integer) > kMaxSharedValueBytes) return too_large();
    if ((*len)->integer == 0) {
      auto exists = client_.Command({"EXISTS", k});
      if (!exists.ok()) return exists.status();
      if ((*exists)->type != REDIS_REPLY_INTEGER || (*exists)->integer == 0) {
        return std::optional<std::string>();
      }
    }
    const std::string last = std::to_string(kMaxSharedValueBytes);
    auto r = client_.Command({"GETRANGE", k, "0", last});
    if (!r.ok()) return r.status();
    redisReply* reply = r->get();
    if (reply->type != REDIS_REPLY_STRING) return RedisClient::Unexpected("GETRANGE", reply);
    if (reply->len > kMaxSharedValueBytes) return too_large();
    return std::optional<std::string>(std::string(reply->str, reply->len));
  }

  Status Put(const ArtifactKey& key, std::string_view value) override {
    std::vector<std::string_view> args = {"SET", ""};
    std::string k = config_.prefix + key.ToString();
    args[1] = k;
    args.push_back(value);
    std::string ttl = std::to_string(config_.ttl_s);
    if (config_.ttl_s > 0) {
      args.push_back("EX");
      args.push_back(ttl);
    }
    auto r = client_.Command(args);
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_STATUS) return RedisClient::Unexpected("SET", r->get());
    return Status::Ok();
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::vector<std::string> keys;
    std::string cursor = "0";
    const std::string match = GlobEscape(config_.prefix + std::string(prefix)) + "*";
    do {
      auto r = client_.Command({"SCAN", cursor, "MATCH", match, "COUNT", "1000"});
      if (!r.ok()) return r.status();
      redisReply* reply = r->get();
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
          reply->element[0]->type != REDIS_REPLY_STRING ||
          reply->element[1]->type != REDIS_REPLY_ARRAY) {
        return RedisClient::Unexpected("SCAN", reply);
      }
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      redisReply* batch = reply->element[1];
      for (size_t i = 0; i < batch->elements; ++i) {
        std::string k(batch->element[i]->str, batch->element[i]->len);
        if (k.compare(0, config_.prefix.size(), config_.prefix) == 0) {
          k.erase(0, config_.prefix.size());
          if (ArtifactKey::Parse(k).ok()) keys.push_back(std::move(k));
        }
      }
    } while (cursor != "0");
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());  // SCAN may repeat keys
    return keys;
  }

  Status Delete(const ArtifactKey& key) override {
    auto r = client_.Command({"DEL", config_.prefix + key.ToString()});
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER) return RedisClient::Unexpected("DEL", r->get());
    return Status::Ok();
  }

  std::string Describe() const override { return "redis://" + client_.Where(); }

 private:
 private:
  RedisClient client_;
  const RedisConfig& config_;
};

}  // namespace

Result<ArtifactStorePtr> OpenRedisStore(std::string_view url) {
  Result<RedisConfig> config = ParseRedisUrl(url);
  if (!config.ok()) return config.status();
  auto store = std::make_unique<RedisStore>(std::move(*config));
  SEEDD_RETURN_IF_ERROR(store->Ping());
  return ArtifactStorePtr(std::move(store));
}

}  // namespace seedd
