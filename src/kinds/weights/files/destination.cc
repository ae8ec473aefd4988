#include "kinds/weights/files/destination.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "kinds/weights/files/file_digests.h"
#include "seedd/logging.h"

namespace seedd {

std::filesystem::path NormalizeDestination(const std::filesystem::path& into) {
  std::filesystem::path p = into.lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dest/"
  return p;
}

std::filesystem::path StagingDir(const std::filesystem::path& into_given) {
  const std::filesystem::path into = NormalizeDestination(into_given);
  const auto parent = into.has_parent_path() ? into.parent_path() : std::filesystem::path(".");
  return parent / ("." + into.filename().string() + ".seedd-staging");
}

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kReserved = ".seedd-";
constexpr const char* kInnerStaging = ".seedd-staging";
constexpr const char* kInnerOld = ".seedd-old";

bool Reserved(const fs::path& name) { return name.string().rfind(kReserved, 0) == 0; }

// The entries of `dir` other than .seedd-*; the first few names, sorted, in `sample`.
size_t CountEntries(const fs::path& dir, std::string* sample, std::error_code& ec) {
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!Reserved(it->path().filename())) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i < names.size() && i < 3; ++i) {
    *sample += (i == 0 ? "'" : ", '") + names[i] + "'";
  }
  return names.size();
}

// A mount point's name cannot be renamed: it lives on another device than its parent.
bool IsMountPoint(const fs::path& dir) {
  struct stat self {};
  struct stat parent {};
  if (::stat(dir.c_str(), &self) != 0 || ::stat((dir / "..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev || self.st_ino == parent.st_ino;
}

// Renames every entry of `from` but .seedd-* into `to` (no replacing).
Status MoveEntries(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  std::vector<fs::path> names;
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    if (!Reserved(it->path().filename())) names.push_back(it->path().filename());
  }
  if (ec) return Status::IoError("list " + from.string() + ": " + ec.message());
  for (const fs::path& name : names) {
    if (::renameat2(AT_FDCWD, (from / name).c_str(), AT_FDCWD, (to / name).c_str(),
                    RENAME_NOREPLACE) != 0) {
      return ErrnoStatus("move " + (from / name).string() + " to " + to.string(), errno);
    }
  }
  return Status::Ok();
}

}  // namespace

bool HoldsVersion(const fs::path& dir, const Manifest& manifest) {
  std::map<std::string, uint64_t> want;
  for (const ManifestFile& f : manifest.files) want[f.path] = f.size;
  std::error_code ec;
  size_t seen = 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path rel = it->path().lexically_relative(dir);
    if (Reserved(*rel.begin())) {
      if (it.depth() == 0 && it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink(ec)) return false;
    if (it->is_directory(ec)) continue;
    auto w = want.find(rel.generic_string());
    if (w == want.end() || !it->is_regular_file(ec) || it->file_size(ec) != w->second) return false;
    ++seen;
  }
  if (ec || seen != want.size()) return false;
  UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return false;
  std::map<std::string, UniqueFd> files;
  std::string buf;
  for (const ManifestChunk& c : manifest.chunks) {
    auto f = files.find(c.file);
    if (f == files.end()) {
      Result<UniqueFd> fd = OpenBeneath(root.get(), c.file, O_RDONLY);
      if (!fd.ok()) return false;
      files.clear();  // one file open at a time: chunks come in file order
      f = files.emplace(c.file, std::move(*fd)).first;
    }
    buf.resize(c.length);
    if (!ReadExactly(f->second.get(), c.offset, buf.data(), buf.size(), c.file).ok()) return false;
    if (ChunkDigestHex(manifest.chunk_digest, buf) != c.digest) return false;
  }
  return true;
}

Result<DestinationPlan> PlanDestination(const fs::path& into_given, const Manifest& manifest,
                                        bool replace) {
  DestinationPlan plan;
  plan.into = NormalizeDestination(into_given);
  const std::string name = plan.into.filename().string();
  if (name.empty() || name == "." || name == ".." || plan.into == "/") {
    return Status::InvalidArgument("the destination '" + into_given.string() +
                                   "' does not name a directory");
  }
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(plan.into, ec);
  if (!fs::exists(st)) {
    plan.placement = Placement::kCreate;
    plan.staging = StagingDir(plan.into);
    return plan;
  }
  if (!fs::is_directory(st)) {
    return Status::AlreadyExists(plan.into.string() +
                                 " exists and is not a directory; pull into a directory");
  }
  std::string sample;
  const size_t entries = CountEntries(plan.into, &sample, ec);
  if (ec) return Status::IoError("list " + plan.into.string() + ": " + ec.message());
  if (entries == 0) {
    plan.placement = Placement::kFillEmpty;
    plan.staging = plan.into / kInnerStaging;
    return plan;
  }
  Logger().info("{} is not empty: checking whether it holds {} (root digest {})",
                plan.into.string(), manifest.model, manifest.root_digest);
  if (HoldsVersion(plan.into, manifest)) {
    plan.placement = Placement::kUpToDate;
    return plan;
  }
  if (!replace) {
    return Status::AlreadyExists(plan.into.string() + " holds files that are not this version (" +
                                 sample + (entries > 3 ? ", ..." : "") +
                                 "); pass --replace to replace them with the model, or pull "
                                 "into a new or empty directory");
  }
  const bool mount_point = IsMountPoint(plan.into);
  plan.placement = mount_point ? Placement::kReplaceEntries : Placement::kReplaceDir;
  plan.staging = mount_point ? plan.into / kInnerStaging : StagingDir(plan.into);
  return plan;
}

Status InstallStaged(const DestinationPlan& plan) {
  const fs::path parent = plan.into.has_parent_path() ? plan.into.parent_path() : fs::path(".");
  std::error_code ec;
  switch (plan.placement) {
    case Placement::kUpToDate:
      return Status::Ok();
    case Placement::kCreate:
      fs::rename(plan.staging, plan.into, ec);
      if (ec) {
        return Status::IoError("rename " + plan.staging.string() + " to " + plan.into.string() +
                               ": " + ec.message());
      }
      return SyncDirectory(parent);
    case Placement::kReplaceDir: {
      if (::renameat2(AT_FDCWD, plan.staging.c_str(), AT_FDCWD, plan.into.c_str(),
                      RENAME_EXCHANGE) != 0) {
        return ErrnoStatus("swap " + plan.staging.string() + " for " + plan.into.string(), errno);
      }
      SEEDD_RETURN_IF_ERROR(SyncDirectory(parent));
      fs::remove_all(plan.staging, ec);  // the old files, now under the staging name
      if (ec)
        Logger().warn("Cannot remove the replaced files in {}: {}", plan.staging.string(),
                      ec.message());
      return Status::Ok();
    }
    case Placement::kFillEmpty:
      SEEDD_RETURN_IF_ERROR(MoveEntries(plan.staging, plan.into));
      break;
    case Placement::kReplaceEntries: {
      const fs::path old = plan.into / kInnerOld;
      fs::remove_all(old, ec);
      fs::create_directory(old, ec);
      if (ec) return Status::IoError("create " + old.string() + ": " + ec.message());
      SEEDD_RETURN_IF_ERROR(MoveEntries(plan.into, old));
      SEEDD_RETURN_IF_ERROR(MoveEntries(plan.staging, plan.into));
      fs::remove_all(old, ec);
      break;
    }
  }
  fs::remove(plan.staging, ec);
  return SyncDirectory(plan.into);
}

}  // namespace seedd
