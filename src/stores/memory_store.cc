#include <map>
#include <mutex>

#include "common/mutex.h"
#include "seedd/artifact_store.h"

namespace seedd {
namespace {

class MemoryArtifactStore final : public ArtifactStore {
 public:
  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    MutexLock lock(mu_);
    auto it = values_.find(key.ToString());
    if (it == values_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status Put(const ArtifactKey& key, std::string_view value) override {
    MutexLock lock(mu_);
    values_[key.ToString()] = std::string(value);
    return Status::Ok();
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    MutexLock lock(mu_);
    std::vector<std::string> keys;
    for (auto it = values_.lower_bound(std::string(prefix));
         it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      keys.push_back(it->first);
    }
    return keys;
  }
  Status Delete(const ArtifactKey& key) override {
    MutexLock lock(mu_);
    values_.erase(key.ToString());
    return Status::Ok();
  }
  std::string Describe() const override { return "memory"; }

 private:
  Mutex mu_;
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);
};

}  // namespace

ArtifactStorePtr NewMemoryArtifactStore() { return std::make_unique<MemoryArtifactStore>(); }

}  // namespace seedd
