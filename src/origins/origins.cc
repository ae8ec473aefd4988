// The public face of origins (seedd/origins.h): URLs to origins, and a model
// fetched from one into a directory.
#include "seedd/origins.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>

#include <cerrno>
#include <chrono>
#include <system_error>

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

namespace {

// A model from its upstream into a directory below `root` (CopyFromOrigin's
// work), with `options` for the fetch; the access's range settings apply.
Result<OriginCopy> Copy(std::string_view url, const std::filesystem::path& root,
                        const OriginAccess& access, MaterializeOptions options) {
  const auto start = std::chrono::steady_clock::now();
  Result<OriginPtr> origin = OpenOrigin(url, access);
  if (!origin.ok()) return origin.status();
  Result<OriginModel> model = (*origin)->Resolve();
  if (!model.ok()) return model.status();
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

}  // namespace

Result<OriginCopy> CopyFromOrigin(std::string_view url, const std::filesystem::path& root,
                                  const OriginAccess& access,
                                  const std::vector<std::filesystem::path>& reuse_from,
                                  const std::function<void(uint64_t, uint64_t)>& progress,
                                  const std::shared_ptr<std::atomic<bool>>& cancel) {
  MaterializeOptions options;
  options.reuse_from = reuse_from;
  options.progress = progress;
  options.cancel = cancel;
  return Copy(url, root, access, std::move(options));
}

Result<OriginCopy> PullFromOrigin(std::string_view url, const std::filesystem::path& into_arg,
                                  const OriginPullOptions& options) {
  namespace fs = std::filesystem;
  SEEDD_RETURN_IF_ERROR(CheckOriginUrl(url));
  std::error_code ec;
  const fs::path into = fs::absolute(into_arg, ec).lexically_normal();
  if (ec || into_arg.empty() || into.filename().empty()) {
    return Status::InvalidArgument(into_arg.string() + ": not a directory name");
  }
  // Where the files may go, decided before any byte moves.
  enum class Place { kCreate, kFillEmpty, kReplace } place = Place::kCreate;
  if (fs::exists(fs::symlink_status(into, ec))) {
    if (!fs::is_directory(fs::symlink_status(into, ec))) {
      return Status::FailedPrecondition(into.string() + " exists and is not a directory");
    }
    if (fs::is_empty(into, ec)) {
      place = Place::kFillEmpty;
    } else if (options.replace) {
      place = Place::kReplace;
    } else {
      return Status::FailedPrecondition(into.string() +
                                        " holds files; replace them (seedctl pull --replace, "
                                        "replace=True in Python) to swap them for the model");
    }
  }
  // The upstream copy is made beside `into` (same file system: moved, not copied).
  const fs::path root = into.parent_path() / ("." + into.filename().string() + ".seedd-origin");
  MaterializeOptions fetch;
  fetch.reuse_dirs = options.reuse_from;
  if (place == Place::kReplace) fetch.reuse_dirs.push_back(into);  // the version it replaces
  fetch.progress = options.progress;
  fetch.cancel = options.cancel;
  Result<OriginCopy> copy = Copy(url, root, options.access, std::move(fetch));
  if (!copy.ok()) {
    fs::remove_all(root, ec);
    return copy.status();
  }
  std::string moved_error;
  switch (place) {
    case Place::kCreate:
      fs::rename(copy->dir, into, ec);
      if (ec) moved_error = ec.message();
      break;
    case Place::kFillEmpty:
      for (const auto& e : fs::directory_iterator(copy->dir, ec)) {
        fs::rename(e.path(), into / e.path().filename(), ec);
        if (ec) {
          moved_error = e.path().filename().string() + ": " + ec.message();
          break;
        }
      }
      break;
    case Place::kReplace:
      // Swapped atomically: a reader sees the old files or the new, never a mix.
      if (::renameat2(AT_FDCWD, copy->dir.c_str(), AT_FDCWD, into.c_str(), RENAME_EXCHANGE) != 0) {
        moved_error = std::error_code(errno, std::generic_category()).message();
      }
      break;
  }
  fs::remove_all(root, ec);  // the record, and the old files after a swap
  if (!moved_error.empty()) {
    return Status::Internal("fetched " + std::string(url) + " but could not move it into " +
                            into.string() + ": " + moved_error);
  }
  copy->dir = into;
  return copy;
}

Json OriginPullJson(std::string_view url, const OriginCopy& copy) {
  return {{"from", std::string(url)},
          {"into", copy.dir.string()},
          {"version", copy.version},
          {"files", copy.files},
          {"total_bytes", copy.total_bytes},
          {"bytes_fetched", copy.bytes_fetched},
          {"bytes_reused", copy.bytes_reused},
          {"files_unverified", copy.files_unverified},
          {"seconds", copy.seconds}};
}

Result<OriginPush> PushToRegistry(std::string_view url, const std::filesystem::path& dir,
                                  const OriginAccess& access,
                                  const std::function<void(uint64_t, uint64_t)>& progress) {
  if (url.rfind("s3://", 0) == 0) return PushS3Dir(url, dir, access, progress);
  return PushModelPackDir(url, dir, access, progress);
}

}  // namespace seedd
