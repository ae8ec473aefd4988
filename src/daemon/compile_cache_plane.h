// The daemon's weights data plane for compile caches too large to travel
// inline (seedd/compile_cache.h): a cache directory served as a model, and a
// bundle's content pulled as the daemon's --pull pulls (relaying meanwhile).
//
// Thread safety: Serve and Fetch may run concurrently; SetFetcher happens
// before the first Fetch (at start, once listening).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/mutex.h"
#include "seedd/compile_cache.h"
#include "seedd/weights.h"

namespace seedd {

class WeightServer;

class DaemonCompileCachePlane final : public CompileCacheDataPlane {
 public:
  // Pulls `model` pinned to `root_digest` into <cache_dir>/weights/MODEL/ROOT.
  using Puller = std::function<Status(const std::string& model, const std::string& root_digest)>;

  DaemonCompileCachePlane(std::filesystem::path cache_dir, BuildOptions build,
                          std::shared_ptr<WeightServer> server);

  // How Fetch pulls: set once the daemon listens (it relays what it pulls).
  void SetPuller(Puller pull);

  Result<std::string> Serve(const std::string& model, const std::filesystem::path& dir,
                            const std::vector<std::string>& paths,
                            std::map<std::string, std::string>* sha256) override;
  Result<std::filesystem::path> Fetch(const std::string& model,
                                      const std::string& root_digest) override;

 private:
  const std::filesystem::path cache_dir_;
  const BuildOptions build_;
  const std::shared_ptr<WeightServer> server_;
  Mutex mu_;
  Puller pull_ GUARDED_BY(mu_);
};

}  // namespace seedd
