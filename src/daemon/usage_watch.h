// Whether the engine used what the daemon installed: after a warmup installs
// files (a compile cache, an autotune table, a pulled model), the daemon
// watches them with fanotify and counts, per cache, the installed files that
// another process opened since. A cache none of whose files was opened within
// the grace period is reported once as a warning: the engine rebuilt instead
// (its key factors differ) or looks elsewhere.
//
// Directory marks with FAN_EVENT_ON_CHILD and FAN_REPORT_FID: one mark per
// directory holding installed files, each event naming the opened file by its
// file handle; an event whose process is the daemon itself (serving the files
// to peers, bundling a cache) is not counted. Linux 5.13 or later lets an
// unprivileged daemon do this; where fanotify is refused the report says so
// and nothing is counted.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "seedd/json.h"

namespace seedd {

class UsageWatch {
 public:
  // Starts the watching thread; `grace` is how long a cache may go unopened
  // before the warning.
  static std::unique_ptr<UsageWatch> Start(std::chrono::milliseconds grace);
  virtual ~UsageWatch() = default;

  // Watches `files` (paths of regular files just installed) as `cache` (e.g.
  // "compile_cache:triton"). `hint` ends the warning (what to check). A cache
  // watched again replaces its earlier files.
  virtual void Watch(const std::string& cache, const std::vector<std::filesystem::path>& files,
                     const std::string& hint) = 0;
  // Counts `file` (one of the paths given to Watch) of `cache` as opened by
  // another process: an engine that read it through the daemon (a pull from it
  // by a fetcher that does not relay). Unknown caches and files are ignored.
  virtual void MarkUsed(const std::string& cache, const std::filesystem::path& file) = 0;
  // Whether `cache` is watched: what MarkUsed needs is worth finding out.
  virtual bool Watches(const std::string& cache) const = 0;

  struct Report {
    std::string cache;
    size_t installed = 0;  // files watched
    size_t opened = 0;     // of them, opened by another process since
    double seconds_since_install = 0;
    double first_open_after = -1;  // seconds from install to the first open; -1: none
    std::string state;             // "used", "waiting" (within the grace), "unused", "unwatched"
    std::string watch;             // "fanotify", or why the files are not watched
  };
  virtual std::vector<Report> Snapshot() const = 0;
  // The reports as /status shows them.
  Json SnapshotJson() const;
};

}  // namespace seedd
