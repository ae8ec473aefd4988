#include "daemon/compile_cache_plane.h"

#include <set>

#include "common/mutex.h"
#include "kinds/weights/files/local_copy.h"
#include "kinds/weights/files/model_index.h"
#include "kinds/weights/net/weight_server.h"
#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {

DaemonCompileCachePlane::DaemonCompileCachePlane(std::filesystem::path cache_dir,
                                                 BuildOptions build,
                                                 std::shared_ptr<WeightServer> server)
    : cache_dir_(std::move(cache_dir)), build_(std::move(build)), server_(std::move(server)) {}

void DaemonCompileCachePlane::SetPuller(Puller pull) {
  MutexLock lock(mu_);
  pull_ = std::move(pull);
}

Result<std::string> DaemonCompileCachePlane::Serve(const std::string& model,
                                                   const std::filesystem::path& dir,
                                                   const std::vector<std::string>& paths,
                                                   std::map<std::string, std::string>* sha256) {
  auto listed =
      std::make_shared<const std::set<std::string, std::less<>>>(paths.begin(), paths.end());
  BuildOptions build = build_;
  build.include = [listed](std::string_view path) { return listed->count(path) != 0; };
  Result<IndexedModel> index = IndexModel(model, dir, build);
  if (!index.ok()) return index.status();
  for (const ManifestFile& f : index->manifest.files) (*sha256)[f.path] = f.sha256;
  const std::string root = index->manifest.root_digest;
  Logger().info("Serving compile cache {} from {} on the data plane: {} files, {}, root digest {}",
                model, dir.string(), index->manifest.files.size(),
                HumanBytes(index->manifest.total_size), root);
  server_->Publish(ServeIndexed(std::move(*index)));
  return root;
}

Result<std::filesystem::path> DaemonCompileCachePlane::Fetch(const std::string& model,
                                                             const std::string& root_digest) {
  const std::filesystem::path dir = cache_dir_ / "weights" / model / root_digest;
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    // Pulled before and unchanged since: served again, installed from.
    Result<ServedModel> local = LoadLocalCopy(dir, root_digest);
    if (local.ok()) {
      server_->Publish(std::move(*local));
      return dir;
    }
  }
  Puller pull;
  {
    MutexLock lock(mu_);
    pull = pull_;
  }
  if (!pull) {
    return Status::FailedPrecondition("cannot pull " + model + ": the data plane is not started");
  }
  SEEDD_RETURN_IF_ERROR(pull(model, root_digest));
  return dir;
}

}  // namespace seedd
