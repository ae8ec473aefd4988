// The public face of origins (seedd/origins.h): URLs to origins, and a model
// fetched from one into a directory.
#include "seedd/origins.h"

#include <chrono>

#include "origins/materialize.h"
#include "origins/oci.h"
#include "origins/oci_push.h"
#include "origins/s3_origin.h"
#include "stores/store_url.h"

namespace seedd {

bool IsOriginUrl(std::string_view spec) {
  return spec.rfind("oci://", 0) == 0 || spec.rfind("s3://", 0) == 0;
}

Status CheckOriginUrl(std::string_view url) {
  if (url.rfind("oci://", 0) == 0) return ParseOciReference(url).status();
  if (url.rfind("s3://", 0) == 0) {
    // The form only: credentials are looked for when the model is fetched.
    Result<StoreUrl> u = StoreUrl::Parse(url);
    if (!u.ok()) return u.status().WithContext(std::string(url));
    if (u->host.empty()) return Status::InvalidArgument(std::string(url) + ": no bucket");
    return Status::Ok();
  }
  return Status::InvalidArgument(std::string(url) + ": not an origin URL (oci://, s3://)");
}

Result<OriginPtr> OpenOrigin(std::string_view url, const OriginAccess& access) {
  if (url.rfind("oci://", 0) == 0) {
    Result<OciReference> ref = ParseOciReference(url);
    if (!ref.ok()) return ref.status();
    return OpenOciOrigin(*ref, access);
  }
  if (url.rfind("s3://", 0) == 0) return OpenS3Origin(url, access);
  return Status::InvalidArgument(std::string(url) + ": not an origin URL (oci://, s3://)");
}

Result<OriginCopy> CopyFromOrigin(std::string_view url, const std::filesystem::path& root,
                                  const OriginAccess& access,
                                  const std::vector<std::filesystem::path>& reuse_from,
                                  const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  Result<OriginPtr> origin = OpenOrigin(url, access);
  if (!origin.ok()) return origin.status();
  Result<OriginModel> model = (*origin)->Resolve();
  if (!model.ok()) return model.status();
  MaterializeOptions options;
  options.reuse_from = reuse_from;
  options.progress = progress;
  options.range_bytes = access.range_bytes;
  options.range_streams = access.range_streams;
  MaterializeStats stats;
  Result<std::filesystem::path> dir = MaterializeModel(**origin, *model, root, options, &stats);
  if (!dir.ok()) return dir.status();
  OriginCopy copy;
  copy.dir = *dir;
  copy.version = model->version;
  copy.files = model->files.size();
  copy.total_bytes = model->total_size;
  copy.bytes_fetched = stats.bytes_fetched;
  copy.bytes_reused = stats.bytes_reused;
  copy.already_here = stats.already_here;
  copy.files_unverified = stats.files_unverified;
  copy.ranged_gets = stats.ranged_gets;
  copy.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return copy;
}

Result<OriginPush> PushToRegistry(std::string_view url, const std::filesystem::path& dir,
                                  const OriginAccess& access,
                                  const std::function<void(uint64_t, uint64_t)>& progress) {
  if (url.rfind("s3://", 0) == 0) return PushS3Dir(url, dir, access, progress);
  return PushModelPackDir(url, dir, access, progress);
}

}  // namespace seedd
