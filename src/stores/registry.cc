#include <cassert>
#include <map>
#include <mutex>

#include "common/metrics.h"
#include "common/mutex.h"
#include "seedd/logging.h"
#include "seedd/store_registry.h"
#include "stores/backends.h"
#include "stores/store_url.h"

namespace seedd {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, StoreFactory> factories GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    MutexLock lock(r->mu);
    r->factories["file"] = OpenFileStore;
    r->factories["redis"] = OpenRedisStore;
    r->factories["s3"] = OpenS3Store;
    return r;
  }();
  return *registry;
}

std::string JoinSchemes() {
  std::string out;
  for (const auto& s : KnownStoreSchemes()) out += (out.empty() ? "" : ", ") + s + "://";
  return out;
}

class CountingStore final : public ArtifactStoreWrapper {
 public:
  CountingStore(ArtifactStorePtr inner, std::string backend)
      : ArtifactStoreWrapper(std::move(inner)), backend_(std::move(backend)) {}

  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    auto r = inner().Get(key);
    metrics::StoreOperation(backend_, "get", !r.ok() ? "error" : r->has_value() ? "ok" : "miss");
    return r;
  }
  bool GetNow(const ArtifactKey& key, size_t max_bytes, std::string_view known, Now* now) override {
    if (!inner().GetNow(key, max_bytes, known, now)) return false;
    metrics::StoreOperation(backend_, "get", now->unchanged || now->value ? "ok" : "miss");
    return true;
  }
  Status Put(const ArtifactKey& key, std::string_view value) override {
    Status s = inner().Put(key, value);
    metrics::StoreOperation(backend_, "put", s.ok() ? "ok" : "error");
    return s;
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    auto r = inner().List(prefix);
    metrics::StoreOperation(backend_, "list", r.ok() ? "ok" : "error");
    return r;
  }
  Status Delete(const ArtifactKey& key) override {
    Status s = inner().Delete(key);
    metrics::StoreOperation(backend_, "delete", s.ok() ? "ok" : "error");
    return s;
  }

 private:
  const std::string backend_;
};

class TolerantStore final : public ArtifactStoreWrapper {
 public:
  using ArtifactStoreWrapper::ArtifactStoreWrapper;

  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    auto r = inner().Get(key);
    if (r.ok()) return r;
    Logger().warn("Shared store {} failed to get {}; treating it as a miss: {}", Describe(),
                  key.ToString(), r.status().message());
    return std::optional<std::string>();
  }
  Status Put(const ArtifactKey& key, std::string_view value) override {
    Status s = inner().Put(key, value);
    if (!s.ok()) {
      Logger().warn("Shared store {} failed to put {}: {}", Describe(), key.ToString(),
                    s.message());
    }
    return s;
  }
};

}  // namespace

std::vector<std::string> KnownStoreSchemes() {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [scheme, factory] : r.factories) out.push_back(scheme);
  return out;
}

void RegisterStoreBackend(std::string scheme, StoreFactory factory) {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  bool inserted = r.factories.emplace(std::move(scheme), std::move(factory)).second;
  assert(inserted && "a store scheme was registered twice");
  (void)inserted;
}

std::string RedactStoreUrl(std::string_view url) {
  std::string out(url);
  size_t scheme_end = out.find("://");
  if (scheme_end == std::string::npos) return out;
  // The user information as StoreUrl::Parse reads it: up to the last '@' of the
  // authority, which ends at the first '/' before any '?'.
  const size_t user_start = scheme_end + 3;
  const size_t first_q = out.find('?', user_start);
  size_t authority_end = out.find('/', user_start);
  if (authority_end == std::string::npos ||
      (first_q != std::string::npos && authority_end > first_q)) {
    authority_end = first_q == std::string::npos ? out.size() : first_q;
  }
  size_t at = std::string::npos;
  for (size_t i = user_start; i < authority_end; ++i) {
    if (out[i] == '@') at = i;
  }
  if (at == std::string::npos && !StoreUrl::Parse(url).ok()) {
    // A URL that does not parse may hold a password with a raw '?' or '/'
    // (which ended the authority early): hide everything up to its last '@'.
    at = out.rfind('@');
    if (at != std::string::npos && at < user_start) at = std::string::npos;
  }
  size_t after_userinfo = user_start;
  if (at != std::string::npos) {
    const size_t colon = out.find(':', user_start);
    if (colon != std::string::npos && colon < at) {
      out.replace(colon + 1, at - colon - 1, "***");
      at = colon + 4;
    }
    after_userinfo = at + 1;
  }
  // Secrets passed as query parameters: the values of those names only.
  size_t q = out.find('?', after_userinfo);
  if (q == std::string::npos) return out;
  std::string query = out.substr(q + 1);
  std::string redacted;
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    std::string kv =
        query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    size_t eq = kv.find('=');
    std::string name = kv.substr(0, eq);
    if (eq != std::string::npos && (name == "password" || name == "secret_key" || name == "token" ||
                                    name == "secret" || name == "password_file")) {
      kv = name + "=***";
    }
    redacted += (start == 0 ? "" : "&") + kv;
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return out.substr(0, q + 1) + redacted;
}

Status CheckStoreUrl(std::string_view url) {
  const std::string shown = RedactStoreUrl(url);
  Result<StoreUrl> parsed = StoreUrl::Parse(url);
  if (!parsed.ok()) {
    return Status::InvalidArgument("store " + shown + ": " + parsed.status().message() +
                                   " (known schemes: " + JoinSchemes() + ")");
  }
  bool known = false;
  {
    Registry& r = GetRegistry();
    MutexLock lock(r.mu);
    known = r.factories.count(parsed->scheme) != 0;
  }
  if (!known) {  // JoinSchemes takes the lock itself
    return Status::InvalidArgument("store " + shown + ": unknown scheme '" + parsed->scheme +
                                   "' (known schemes: " + JoinSchemes() + ")");
  }
  return Status::Ok();
}

Result<ArtifactStorePtr> OpenArtifactStore(std::string_view url) {
  const std::string shown = RedactStoreUrl(url);
  Result<StoreUrl> parsed = StoreUrl::Parse(url);
  if (!parsed.ok()) {
    return Status::InvalidArgument("store " + shown + ": " + parsed.status().message() +
                                   " (known schemes: " + JoinSchemes() + ")");
  }
  StoreFactory factory;
  {
    Registry& r = GetRegistry();
    MutexLock lock(r.mu);
    auto it = r.factories.find(parsed->scheme);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    return Status::InvalidArgument("store " + shown + ": unknown scheme '" + parsed->scheme +
                                   "' (known schemes: " + JoinSchemes() + ")");
  }
  Result<ArtifactStorePtr> store = factory(url);
  if (!store.ok()) return store.status().WithContext("store " + shown);
  return NewCountingStore(std::move(*store), parsed->scheme);
}

ArtifactStorePtr NewCountingStore(ArtifactStorePtr inner, std::string backend) {
  return std::make_unique<CountingStore>(std::move(inner), std::move(backend));
}

ArtifactStorePtr NewTolerantStore(ArtifactStorePtr inner) {
  return std::make_unique<TolerantStore>(std::move(inner));
}

}  // namespace seedd
