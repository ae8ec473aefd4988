#include "daemon/usage_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

using Clock = std::chrono::steady_clock;

// A file's identity as fanotify reports it: the filesystem id, then the handle
// type and bytes.
std::string FidKey(const __kernel_fsid_t& fsid, int handle_type, std::string_view handle) {
  std::string key(reinterpret_cast<const char*>(&fsid), sizeof fsid);
  key.append(reinterpret_cast<const char*>(&handle_type), sizeof handle_type);
  key.append(handle);
  return key;
}

std::optional<std::string> FidOfPath(const std::filesystem::path& path, std::string* error) {
  struct statfs sfs;
  if (::statfs(path.c_str(), &sfs) != 0) {
    *error = "statfs " + path.string() + ": " + std::strerror(errno);
    return std::nullopt;
  }
  alignas(file_handle) char buf[sizeof(file_handle) + MAX_HANDLE_SZ];
  auto* fh = reinterpret_cast<file_handle*>(buf);
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (::name_to_handle_at(AT_FDCWD, path.c_str(), fh, &mount_id, 0) != 0) {
    *error = "the file system of " + path.string() + " gives no file handles (" +
             std::strerror(errno) + ")";
    return std::nullopt;
  }
  __kernel_fsid_t fsid;
  static_assert(sizeof fsid == sizeof sfs.f_fsid);
  std::memcpy(&fsid, &sfs.f_fsid, sizeof fsid);
  return FidKey(fsid, fh->handle_type,
                std::string_view(reinterpret_cast<const char*>(fh->f_handle), fh->handle_bytes));
}

class FanotifyUsageWatch final : public UsageWatch {
 public:
  explicit FanotifyUsageWatch(std::chrono::milliseconds grace) : grace_(grace) {
    fan_.Reset(::fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID,
                               O_RDONLY | O_CLOEXEC | O_LARGEFILE));
    if (!fan_.valid()) {
      unavailable_ = std::string("fanotify refused (") + std::strerror(errno) +
                     "): Linux 5.13 or later lets a daemon without CAP_SYS_ADMIN watch";
    }
    stop_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    thread_ = std::thread([this] { Run(); });
  }

  ~FanotifyUsageWatch() override {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_.get(), &one, sizeof one);
    thread_.join();
  }

  void Watch(const std::string& cache, const std::vector<std::filesystem::path>& files,
             const std::string& hint) override {
    Cache c;
    c.name = cache;
    c.hint = hint;
    c.installed_at = Clock::now();
    c.watch = unavailable_.empty() ? "fanotify" : unavailable_;
    std::map<std::string, size_t> fids;
    std::set<std::filesystem::path> dirs;
    for (const std::filesystem::path& f : files) {
      std::string error;
      std::optional<std::string> fid = FidOfPath(f, &error);
      if (!fid) {
        if (c.watch == "fanotify") c.watch = error;
        continue;
      }
      auto added = fids.emplace(std::move(*fid), fids.size());
      c.by_path.emplace(f.string(), added.first->second);
      dirs.insert(f.parent_path());
    }
    c.files = files.size();
    if (unavailable_.empty()) {
      for (const std::filesystem::path& d : dirs) {
        if (::fanotify_mark(fan_.get(), FAN_MARK_ADD, FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD,
                            d.c_str()) != 0) {
          c.watch = "fanotify_mark " + d.string() + ": " + std::strerror(errno);
          break;
        }
      }
    }
    MutexLock lock(mu_);
    size_t index = caches_.size();
    for (size_t i = 0; i < caches_.size(); ++i) {
      if (caches_[i].name == cache) index = i;
    }
    for (auto it = fids_.begin(); it != fids_.end();) {
      it = it->second.first == index ? fids_.erase(it) : std::next(it);
    }
    for (auto& [fid, file] : fids) fids_[fid] = {index, file};
    c.opened.assign(fids.size(), false);
    if (index == caches_.size()) {
      caches_.push_back(std::move(c));
    } else {
      caches_[index] = std::move(c);
    }
    metrics::InstalledFiles(cache, caches_[index].files, 0);
  }

  std::vector<Report> Snapshot() const override {
    const auto now = Clock::now();
    std::vector<Report> out;
    MutexLock lock(mu_);
    for (const Cache& c : caches_) out.push_back(ReportOf(c, now));
    return out;
  }

 private:
  struct Cache {
    std::string name, hint, watch;
    Clock::time_point installed_at;
    size_t files = 0;
    std::vector<bool> opened;  // by file, of those with a handle
    size_t opened_count = 0;
    std::optional<Clock::time_point> first_open;
    bool warned = false;
    std::map<std::string, size_t> by_path;  // a watched file's path -> its index
  };

  // File `index` of `c` opened at `now` (under mu_).
  static void Opened(Cache& c, size_t index, Clock::time_point now) {
    if (index >= c.opened.size() || c.opened[index]) return;
    c.opened[index] = true;
    ++c.opened_count;
    if (!c.first_open) c.first_open = now;
    metrics::InstalledFiles(c.name, c.files, c.opened_count);
  }

 public:
  bool Watches(const std::string& cache) const override {
    MutexLock lock(mu_);
    for (const Cache& c : caches_) {
      if (c.name == cache) return true;
    }
    return false;
  }

  void MarkUsed(const std::string& cache, const std::filesystem::path& file) override {
    MutexLock lock(mu_);
    for (Cache& c : caches_) {
      if (c.name != cache) continue;
      auto it = c.by_path.find(file.string());
      if (it != c.by_path.end()) Opened(c, it->second, Clock::now());
    }
  }

 private:
  Report ReportOf(const Cache& c, Clock::time_point now) const {
    Report r;
    r.cache = c.name;
    r.installed = c.files;
    r.opened = c.opened_count;
    r.seconds_since_install = std::chrono::duration<double>(now - c.installed_at).count();
    if (c.first_open) {
      r.first_open_after = std::chrono::duration<double>(*c.first_open - c.installed_at).count();
    }
    r.watch = c.watch;
    if (c.watch != "fanotify") {
      r.state = "unwatched";
    } else if (c.opened_count > 0) {
      r.state = "used";
    } else {
      r.state = now - c.installed_at < grace_ ? "waiting" : "unused";
    }
    return r;
  }

  void Run() {
    char buf[64 << 10];
    const pid_t self = ::getpid();
    for (;;) {
      pollfd p[2] = {{stop_.get(), POLLIN, 0}, {fan_.get(), POLLIN, 0}};
      const int n = ::poll(p, fan_.valid() ? 2 : 1, 1000);
      if (n > 0 && (p[0].revents & POLLIN) != 0) return;
      if (n > 0 && (p[1].revents & POLLIN) != 0) {
        for (;;) {
          const ssize_t len = ::read(fan_.get(), buf, sizeof buf);
          if (len <= 0) break;
          const auto now = Clock::now();
          MutexLock lock(mu_);
          // Events with file handles need not be 8-byte aligned in the buffer:
          // each part is copied out before it is read.
          for (size_t off = 0; off + sizeof(fanotify_event_metadata) <= static_cast<size_t>(len);) {
            fanotify_event_metadata m;
            std::memcpy(&m, buf + off, sizeof m);
            if (m.vers != FANOTIFY_METADATA_VERSION || m.event_len < m.metadata_len ||
                m.metadata_len < sizeof m || off + m.event_len > static_cast<size_t>(len)) {
              break;
            }
            const char* info = buf + off + m.metadata_len;
            const size_t info_len = m.event_len - m.metadata_len;
            off += m.event_len;
            constexpr size_t kHandleAt = offsetof(fanotify_event_info_fid, handle);
            if (m.pid == self || info_len < kHandleAt + sizeof(file_handle)) continue;
            fanotify_event_info_header hdr;
            std::memcpy(&hdr, info, sizeof hdr);
            if (hdr.info_type != FAN_EVENT_INFO_TYPE_FID) continue;
            __kernel_fsid_t fsid;
            std::memcpy(&fsid, info + offsetof(fanotify_event_info_fid, fsid), sizeof fsid);
            file_handle fh;
            std::memcpy(&fh, info + kHandleAt, sizeof fh);
            if (kHandleAt + sizeof fh + fh.handle_bytes > info_len) continue;
            auto it =
                fids_.find(FidKey(fsid, fh.handle_type,
                                  std::string_view(info + kHandleAt + sizeof fh, fh.handle_bytes)));
            if (it == fids_.end()) continue;
            Opened(caches_[it->second.first], it->second.second, now);
          }
        }
      }
      WarnUnused(Clock::now());
    }
  }

  void WarnUnused(Clock::time_point now) {
    MutexLock lock(mu_);
    for (Cache& c : caches_) {
      if (c.warned || c.opened_count > 0 || c.watch != "fanotify" ||
          now - c.installed_at < grace_) {
        continue;
      }
      c.warned = true;
      Logger().warn(
          "{}: {} files installed {:.0f} s ago and none opened since: the engine rebuilt "
          "instead or reads another directory; {}",
          c.name, c.files, std::chrono::duration<double>(now - c.installed_at).count(), c.hint);
    }
  }

  const std::chrono::milliseconds grace_;
  UniqueFd fan_;
  UniqueFd stop_;
  std::string unavailable_;  // set once, before the thread starts
  mutable Mutex mu_;
  std::vector<Cache> caches_ GUARDED_BY(mu_);
  // A watched file's identity -> (cache index, file index).
  std::map<std::string, std::pair<size_t, size_t>> fids_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

std::unique_ptr<UsageWatch> UsageWatch::Start(std::chrono::milliseconds grace) {
  return std::make_unique<FanotifyUsageWatch>(grace);
}

Json UsageWatch::SnapshotJson() const {
  Json out = Json::array();
  for (const Report& r : Snapshot()) {
    Json e = {{"cache", r.cache},         {"files_installed", r.installed},
              {"files_opened", r.opened}, {"seconds_since_install", r.seconds_since_install},
              {"state", r.state},         {"watch", r.watch}};
    if (r.first_open_after >= 0) e["first_open_after_seconds"] = r.first_open_after;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace seedd
