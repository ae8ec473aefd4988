#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/crypto.h"
#include "common/mutex.h"
#include "seedd/artifact_kind.h"
#include "seedd/json_text.h"
#include "stores/backends.h"

namespace seedd {
namespace {

bool AllOf(std::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

bool NamespaceChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}
bool FilenameChar(char c) { return NamespaceChar(c) || (c >= 'A' && c <= 'Z'); }

Result<std::string> StringField(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end()) return Status::InvalidArgument(std::string("missing field '") + name + "'");
  if (!it->is_string()) {
    return Status::InvalidArgument(std::string("field '") + name + "' must be a string");
  }
  return it->get<std::string>();
}

class ArtifactSeedable final : public Seedable {
 public:
  ArtifactSeedable(ArtifactStorePtr store, std::vector<std::shared_ptr<ArtifactStore>> shared)
      : store_(std::move(store)), shared_(std::move(shared)) {}

  std::string_view kind() const override { return kArtifactKind; }

  Result<Json> RequestParams(const Json& ctx) const override {
    Result<ArtifactKey> key = ArtifactKeyFromFields(ctx);
    if (!key.ok()) return key.status();
    return Json{{"namespace", key->kind()},
                {"config_hash", key->config_hash()},
                {"filename", key->filename()}};
  }

  Result<std::optional<Json>> Resolve(const Json& request) const override {
    Result<ArtifactKey> key = ArtifactKeyFromFields(request);
    if (!key.ok()) return key.status();
    // The local disk store first, then the shared stores in the order given.
    Result<std::optional<std::string>> data = store_->Get(*key);
    for (size_t i = 0; data.ok() && !data->has_value() && i < shared_.size(); ++i) {
      data = shared_[i]->Get(*key);
    }
    if (!data.ok()) return data.status();
    if (!data->has_value()) return std::optional<Json>();
    const std::string& bytes = **data;
    if (bytes.size() > kMaxArtifactBytes) {
      return Status::ResourceExhausted("artifact " + key->ToString() + " is larger than 16 MiB");
    }
    return std::optional<Json>(Payload(key->filename(), bytes));
  }

  // A key that does not parse, an artifact in the local store's caches (up to
  // kAnswerNowBytes), or a miss there with no shared store to ask. The answer to
  // an artifact is kept with the version of the bytes it was made from: while
  // they are unchanged, the next request costs a stat instead of a read, a
  // SHA-256, base64 and JSON.
  bool ResolveTextNow(const Json& request,
                      Result<std::optional<std::string>>* text) const override {
    Result<ArtifactKey> key = ArtifactKeyFromFields(request);
    if (!key.ok()) {
      *text = key.status();
      return true;
    }
    std::string name = key->ToString();
    std::shared_ptr<const Answered> kept = FindAnswered(name);
    ArtifactStore::Now now;
    if (!store_->GetNow(*key, kAnswerNowBytes, kept ? kept->version : std::string_view(), &now)) {
      return false;
    }
    if (now.unchanged) {
      *text = std::optional<std::string>(kept->text);
      return true;
    }
    if (!now.value.has_value()) {
      if (kept) ForgetAnswered(name);
      if (!shared_.empty()) return false;
      *text = std::optional<std::string>();
      return true;
    }
    auto made = std::make_shared<Answered>(
        Answered{std::move(now.version), DumpJson(Payload(key->filename(), *now.value))});
    *text = std::optional<std::string>(made->text);
    if (!made->version.empty()) KeepAnswered(std::move(name), std::move(made));
    return true;
  }

  Result<Json> ValidatePayload(const Json& payload) const override {
    Result<std::string> data = Decode(payload);
    if (!data.ok()) return data.status();
    return payload;
  }

  Status Install(const Json& ctx, const Json& payload) override {
    Result<ArtifactKey> key = ArtifactKeyFromFields(ctx);
    if (!key.ok()) return key.status();
    Result<std::string> data = Decode(payload);
    if (!data.ok()) return data.status();
    if (payload["filename"] != key->filename()) {
      return Status::InvalidArgument("payload is for '" + payload["filename"].get<std::string>() +
                                     "', not the requested '" + key->filename() + "'");
    }
    return store_->Put(*key, *data);
  }

 private:
  // Checks every payload field and returns the verified bytes.
  static Result<std::string> Decode(const Json& payload) {
    if (!payload.is_object()) return Status::InvalidArgument("artifact payload must be an object");
    Result<std::string> filename = StringField(payload, "filename");
    if (!filename.ok()) return filename.status();
    if (filename->empty() || filename->size() > 255 || *filename == "." || *filename == ".." ||
        !AllOf(*filename, FilenameChar)) {
      return Status::InvalidArgument("invalid filename in payload");
    }
    auto size = payload.find("size");
    if (size == payload.end() || !size->is_number_integer() || size->get<int64_t>() < 0 ||
        size->get<uint64_t>() > kMaxArtifactBytes) {
      return Status::InvalidArgument("field 'size' must be an integer from 0 to 16 MiB");
    }
    Result<std::string> sha = StringField(payload, "sha256");
    if (!sha.ok()) return sha.status();
    if (!IsLowerHex(*sha, 64)) {
      return Status::InvalidArgument("field 'sha256' must be 64 lowercase hex digits");
    }
    Result<std::string> text = StringField(payload, "data");
    if (!text.ok()) return text.status();
    if (text->size() > (kMaxArtifactBytes + 2) / 3 * 4) {
      return Status::InvalidArgument("field 'data' is larger than 16 MiB");
    }
    std::optional<std::string> data = Base64Decode(*text);
    if (!data.has_value()) return Status::InvalidArgument("field 'data' is not valid base64");
    if (data->size() != size->get<uint64_t>()) {
      return Status::DataLoss("size mismatch: payload says " +
                              std::to_string(size->get<uint64_t>()) + " bytes, data has " +
                              std::to_string(data->size()));
    }
    if (Sha256Hex(*data) != *sha) return Status::DataLoss("sha256 mismatch");
    return std::move(*data);
  }

  // Artifacts answered on the listener's thread are at most this large: their
  // SHA-256 and base64 take tens of microseconds.
  static constexpr size_t kAnswerNowBytes = 64 * 1024;

  static Json Payload(const std::string& filename, const std::string& bytes) {
    return Json{{"filename", filename},
                {"size", bytes.size()},
                {"sha256", Sha256Hex(bytes)},
                {"data", Base64Encode(bytes)}};
  }

  struct Answered {
    std::string version;  // of the stored bytes it was made from
    std::string text;     // the payload's JSON
  };
  // Kept answers take at most this much memory (then all are dropped).
  static constexpr size_t kAnsweredBytes = 16u << 20;

  std::shared_ptr<const Answered> FindAnswered(const std::string& name) const {
    MutexLock lock(answered_mu_);
    auto it = answered_.find(name);
    return it == answered_.end() ? nullptr : it->second;
  }

  static size_t SizeOf(const std::string& name, const Answered& answer) {
    return name.size() + answer.version.size() + answer.text.size();
  }

  void KeepAnswered(std::string name, std::shared_ptr<const Answered> answer) const {
    MutexLock lock(answered_mu_);
    ForgetLocked(name);
    const size_t bytes = SizeOf(name, *answer);
    if (answered_bytes_ + bytes > kAnsweredBytes) {
      answered_.clear();
      answered_bytes_ = 0;
    }
    answered_bytes_ += bytes;
    answered_.emplace(std::move(name), std::move(answer));
  }

  // The artifact is gone: its kept answer too.
  void ForgetAnswered(const std::string& name) const {
    MutexLock lock(answered_mu_);
    ForgetLocked(name);
  }

  void ForgetLocked(const std::string& name) const REQUIRES(answered_mu_) {
    if (auto it = answered_.find(name); it != answered_.end()) {
      answered_bytes_ -= SizeOf(it->first, *it->second);
      answered_.erase(it);
    }
  }

  ArtifactStorePtr store_;
  std::vector<std::shared_ptr<ArtifactStore>> shared_;
  mutable Mutex answered_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const Answered>> answered_
      GUARDED_BY(answered_mu_);
  mutable size_t answered_bytes_ GUARDED_BY(answered_mu_) = 0;
};

}  // namespace

Result<ArtifactKey> ArtifactKeyFromFields(const Json& fields) {
  if (!fields.is_object()) return Status::InvalidArgument("artifact key must be a JSON object");
  Result<std::string> ns = StringField(fields, "namespace");
  if (!ns.ok()) return ns.status();
  if (ns->empty() || ns->size() > 64 || *ns == "." || *ns == ".." || !AllOf(*ns, NamespaceChar)) {
    return Status::InvalidArgument("invalid namespace (expected [a-z0-9_.-]{1,64})");
  }
  Result<std::string> hash = StringField(fields, "config_hash");
  if (!hash.ok()) return hash.status();
  if (!IsLowerHex(*hash, 16, 128)) {
    return Status::InvalidArgument("invalid config_hash");
  }
  Result<std::string> filename = StringField(fields, "filename");
  if (!filename.ok()) return filename.status();
  if (filename->empty() || filename->size() > 255 || *filename == "." || *filename == ".." ||
      !AllOf(*filename, FilenameChar)) {
    return Status::InvalidArgument("invalid filename (expected [A-Za-z0-9_.-]{1,255})");
  }
  return ArtifactKey::Make(*ns, *hash, *filename);
}

SeedablePtr NewArtifactSeedable(const std::filesystem::path& cache_dir,
                                std::vector<std::shared_ptr<ArtifactStore>> shared) {
  DiskStoreOptions options;
  options.max_value_bytes = kMaxArtifactBytes;
  return NewArtifactSeedable(NewCountingStore(NewDiskArtifactStore("", cache_dir, options), "disk"),
                             std::move(shared));
}

SeedablePtr NewArtifactSeedable(ArtifactStorePtr store,
                                std::vector<std::shared_ptr<ArtifactStore>> shared) {
  return std::make_shared<ArtifactSeedable>(std::move(store), std::move(shared));
}

}  // namespace seedd
