#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>

#include "common/unique_fd.h"
#include "kinds/weights/files/local_copy.h"
#include "seedd/logging.h"
#include "seedd/weights.h"

namespace seedd {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRecordSuffix = ".seedd-record.json";
constexpr std::string_view kStagingSuffix = ".seedd-staging";

bool EndsWith(const std::string& s, std::string_view end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// True when a pull holds the staging directory `dir` (its flock).
bool InUse(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return false;
  return ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

uint64_t SizeOf(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (fs::is_regular_file(st)) return fs::file_size(p, ec);
  if (!fs::is_directory(st)) return 0;
  uint64_t total = 0;
  for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += it->file_size(ec);
  }
  return total;
}

class Collector {
 public:
  Collector(const GcOptions& options, GcReport* report) : options_(options), report_(report) {}

  void Model(const fs::path& base) {
    std::error_code ec;
    const fs::path current = fs::read_symlink(base / "current", ec);
    if (ec) return;  // no version installed: a first pull's staging is kept to resume
    struct Version {
      fs::path dir;
      fs::file_time_type committed;
    };
    std::vector<Version> versions;
    std::vector<fs::path> leftovers;  // removed as they are
    std::vector<fs::path> discard;    // versions: their records go too
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const bool link = it->is_symlink(ec);
      if (name == "current") continue;
      if (name.rfind(".seedd-discard-", 0) == 0 || (name.rfind(".current-", 0) == 0 && link)) {
        leftovers.push_back(it->path());
      } else if (name[0] == '.' && EndsWith(name, kStagingSuffix)) {
        if (!InUse(it->path())) leftovers.push_back(it->path());
      } else if (EndsWith(name, kRecordSuffix)) {
        const fs::path dir = base / name.substr(0, name.size() - kRecordSuffix.size());
        if (!fs::is_directory(fs::symlink_status(dir, ec))) leftovers.push_back(it->path());
      } else if (it->is_directory(ec) && !link && fs::path(name) != current) {
        std::error_code rec;
        fs::file_time_type t = fs::last_write_time(LocalRecordPath(it->path()), rec);
        if (rec) {
          discard.push_back(it->path());  // no record: never served or reused again
        } else {
          versions.push_back({it->path(), t});
        }
      }
    }
    // The newest first; `current` holds one of the places kept.
    std::sort(versions.begin(), versions.end(),
              [](const Version& a, const Version& b) { return a.committed > b.committed; });
    const size_t keep_others = static_cast<size_t>(std::max(1, options_.keep_versions) - 1);
    for (size_t i = keep_others; i < versions.size(); ++i) discard.push_back(versions[i].dir);
    for (const fs::path& p : leftovers) Remove(p, false);
    for (const fs::path& p : discard) Remove(p, true);
  }

 private:
  void Remove(const fs::path& p, bool version) {
    report_->removed.push_back(p);
    report_->bytes += SizeOf(p);
    if (options_.dry_run) return;
    if (version) {
      DiscardLocalCopy(p);  // renamed aside first, its record removed
      return;
    }
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) Logger().warn("Housekeeping: cannot remove {}: {}", p.string(), ec.message());
  }

  const GcOptions& options_;
  GcReport* report_;
};

}  // namespace

Result<GcReport> CollectWeightsGarbage(const fs::path& cache_dir, const GcOptions& options) {
  GcReport report;
  Collector collector(options, &report);
  const fs::path weights = cache_dir / "weights";
  std::error_code ec;
  if (!fs::exists(weights, ec)) return report;
  if (!options.only_model.empty()) {
    collector.Model(weights / options.only_model);
    return report;
  }
  for (fs::directory_iterator it(weights, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || it->is_symlink(ec) || !it->is_directory(ec)) continue;
    collector.Model(it->path());
  }
  if (ec) return Status::IoError("list " + weights.string() + ": " + ec.message());
  return report;
}

}  // namespace seedd
