// seedctl pull: a model's files from seedd daemons (or from its upstream, --from) into a
// directory, retrying sources that are down (or go away) until --timeout, stopped cleanly by
// Ctrl-C.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "seedctl.h"
#include "seedd/json_text.h"
#include "seedd/origins.h"
#include "seedd/units.h"
#include "seedd/weights.h"

namespace seedctl {

namespace {

using Clock = std::chrono::steady_clock;

// A stop request gives the pull this long to end cleanly before the process exits
// (what is verified is journaled as it lands, so exiting then loses nothing).
constexpr auto kStopGrace = std::chrono::seconds(2);

// Ctrl-C and SIGTERM set `cancel`; a pull that has not ended kStopGrace later is
// ended by exiting with kExitInterrupted.
class StopOnSignal {
 public:
  StopOnSignal() : cancel_(std::make_shared<std::atomic<bool>>(false)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread starts
    waiter_ = std::thread([this] { Wait(); });
  }
  ~StopOnSignal() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (!cancel_->load()) pthread_kill(waiter_.native_handle(), SIGTERM);  // end sigwait
    waiter_.join();
  }
  const std::shared_ptr<std::atomic<bool>>& cancel() const { return cancel_; }
  bool stopped() const { return cancel_->load(); }

 private:
  void Wait() {
    int sig = 0;
    sigwait(&set_, &sig);
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    cancel_->store(true);
    if (!cv_.wait_for(lock, kStopGrace, [this] { return done_; })) {
      std::fprintf(stderr, "\nseedctl: stopped; rerun the same command to resume\n");
      std::_Exit(kExitInterrupted);
    }
  }

  sigset_t set_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // GUARDED_BY(mu_)
  std::thread waiter_;
};

// A pull's progress where people (or programs) look: a bar redrawn on a
// terminal, a line every few seconds in a log, or JSON lines. The rate and ETA
// count only the bytes moved by this run (a resumed pull starts with some).
class Progress {
 public:
  enum class Mode { kBar, kLines, kJson, kNone };
  explicit Progress(Mode mode) : mode_(mode), start_(Clock::now()), last_(start_) {}

  void Show(const seedd::PullProgress& p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kNone) return;
    const auto now = Clock::now();
    const auto every = mode_ == Mode::kBar    ? std::chrono::milliseconds(100)
                       : mode_ == Mode::kJson ? std::chrono::milliseconds(1000)
                                              : std::chrono::milliseconds(5000);
    const bool first = !shown_any_;
    if (!first && now - last_ < every && p.verified_bytes < p.total_bytes) return;
    if (first && mode_ == Mode::kLines && now - start_ < std::chrono::seconds(1)) {
      return;  // a pull done within a second prints only its summary
    }
    last_ = now;
    shown_any_ = true;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double moved =
        static_cast<double>(p.verified_bytes - std::min(p.verified_bytes, p.resumed_bytes));
    const double rate = secs > 0 ? moved / secs : 0;
    const double eta = rate > 0 ? static_cast<double>(p.total_bytes - p.verified_bytes) / rate : -1;
    const double pct = 100.0 * static_cast<double>(p.verified_bytes) /
                       static_cast<double>(std::max<uint64_t>(1, p.total_bytes));
    switch (mode_) {
      case Mode::kBar: {
        constexpr int kWidth = 24;
        const int filled = static_cast<int>(pct / 100 * kWidth);
        std::string bar(static_cast<size_t>(filled), '#');
        bar.resize(kWidth, '.');
        std::fprintf(stderr, "\r[%s] %5.1f%%  %s / %s  %s  ETA %s  %zu source(s)   ", bar.c_str(),
                     pct, seedd::HumanBytes(p.verified_bytes).c_str(),
                     seedd::HumanBytes(p.total_bytes).c_str(), seedd::HumanRate(rate).c_str(),
                     seedd::HumanSeconds(eta).c_str(), p.sources);
        bar_open_ = true;
        break;
      }
      case Mode::kLines:
        std::fprintf(stderr, "seedctl: %.0f%%, %s of %s, %s, %zu source(s), ETA %s\n", pct,
                     seedd::HumanBytes(p.verified_bytes).c_str(),
                     seedd::HumanBytes(p.total_bytes).c_str(), seedd::HumanRate(rate).c_str(),
                     p.sources, seedd::HumanSeconds(eta).c_str());
        break;
      case Mode::kJson:
        Json({{"event", "progress"},
              {"verified_bytes", p.verified_bytes},
              {"total_bytes", p.total_bytes},
              {"resumed_bytes", p.resumed_bytes},
              {"bytes_per_second", rate},
              {"eta_seconds", eta >= 0 ? seedd::Json(eta) : seedd::Json(nullptr)},
              {"sources", p.sources},
              {"seconds", secs}});
        break;
      case Mode::kNone:
        break;
    }
  }

  // A line about the pull (a retry): after the bar, on a line of its own.
  void Note(const std::string& text, seedd::Json json) {
    std::lock_guard<std::mutex> lock(mu_);
    EndBarLocked();
    if (mode_ == Mode::kJson) {
      Json(std::move(json));
    } else {
      std::fprintf(stderr, "seedctl: %s\n", text.c_str());
    }
  }

  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    EndBarLocked();
  }

  bool json() const { return mode_ == Mode::kJson; }

  // One JSON object on a line of stdout, flushed (a reader sees it at once).
  static void Json(const seedd::Json& j) {
    std::printf("%s\n", seedd::DumpJson(j).c_str());
    std::fflush(stdout);
  }

 private:
  void EndBarLocked() {
    if (bar_open_) std::fprintf(stderr, "\n");
    bar_open_ = false;
  }

  const Mode mode_;
  const Clock::time_point start_;
  std::mutex mu_;
  Clock::time_point last_;  // GUARDED_BY(mu_)
  bool shown_any_ = false;  // GUARDED_BY(mu_)
  bool bar_open_ = false;   // GUARDED_BY(mu_)
};

Progress::Mode ModeOf(const std::string& flag) {
  if (flag == "bar") return Progress::Mode::kBar;
  if (flag == "lines") return Progress::Mode::kLines;
  if (flag == "json") return Progress::Mode::kJson;
  if (flag == "none") return Progress::Mode::kNone;
  return ::isatty(STDERR_FILENO) != 0 ? Progress::Mode::kBar : Progress::Mode::kLines;
}

void PrintSummary(const PullArgs& args, const seedd::Manifest& m, const seedd::FetchStats& stats,
                  double secs) {
  if (stats.up_to_date) {
    std::printf("%s already holds %s (root digest %s); nothing to pull\n", args.into.c_str(),
                args.model.c_str(), m.root_digest.c_str());
    return;
  }
  size_t seeds = 0;
  size_t relays = 0;
  for (const auto& used : stats.used) (used.seed ? seeds : relays) += 1;
  const uint64_t local = stats.bytes_resumed + stats.bytes_reused;
  const uint64_t moved = m.total_size - std::min(m.total_size, local);
  std::printf(
      "pulled %s (%zu files, %s) from %zu source(s) and %zu relay(s) into %s in %s (%s); %s "
      "from relays, %llu chunk(s) resumed, %llu refetched, %llu hole(s)\n",
      args.model.c_str(), m.files.size(), seedd::HumanBytes(m.total_size).c_str(), seeds, relays,
      args.into.c_str(), seedd::HumanSeconds(secs).c_str(),
      seedd::HumanRate(static_cast<double>(moved) / std::max(secs, 1e-9)).c_str(),
      seedd::HumanBytes(stats.bytes_from_peers).c_str(),
      static_cast<unsigned long long>(stats.chunks_resumed),
      static_cast<unsigned long long>(stats.chunks_rejected),
      static_cast<unsigned long long>(stats.chunks_holes));
  if (stats.bytes_reused > 0) {
    std::printf("%s reused locally (%llu chunk(s) copied from files held here, not fetched)\n",
                seedd::HumanBytes(stats.bytes_reused).c_str(),
                static_cast<unsigned long long>(stats.chunks_reused));
  }
  if (!stats.sources_dropped.empty()) {
    std::string names;
    for (const auto& n : stats.sources_dropped) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "seedctl: dropped on the way (failed or sent bad chunks): %s\n",
                 names.c_str());
  }
}

}  // namespace

int RunPull(const PullArgs& args) {
  for (const auto& t : args.sources) {
    auto hp = seedd::ParseHostPort(t);
    if (!hp.ok()) return Fail("--source: " + hp.status().message());
  }
  auto token = ReadToken(args.token_file);
  if (!token.ok()) return Fail(token.status().message());
  if (args.into.empty()) return Fail("--into is empty: name the directory to pull into");
  if (!args.root_digest.empty()) {
    seedd::Status pin = seedd::ValidatePin(args.root_digest, "--root-digest");
    if (!pin.ok()) return Fail(pin.message());
  }

  std::shared_ptr<const seedd::TrustedKeys> trust;
  if (!args.trust_keys.empty()) {
    auto keys = seedd::TrustedKeys::Load({args.trust_keys.begin(), args.trust_keys.end()});
    if (!keys.ok()) return Fail("--trust-key: " + keys.status().message());
    trust = std::move(*keys);
  }

  StopOnSignal stop;
  seedd::PullOptions options;
  options.trust = trust;
  options.sources = args.sources;
  options.token = *token;
  options.tls = Tls();
  options.root_digest = args.root_digest;
  options.connections = args.connections;
  options.max_neighbours = args.max_neighbours;
  options.verify_sha256 = args.verify == "sha256";
  if (args.verify.rfind("upstream=", 0) == 0) {
    options.upstream = args.verify.substr(9);
    options.upstream_access.auth_file = args.origin_auth;
    options.upstream_access.ca_file = args.origin_ca;
  }
  options.replace = args.replace;
  for (const std::string& dir : args.reuse_from) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return Fail("--reuse-from " + dir + ": not a directory");
    }
    options.reuse_from.emplace_back(dir);
  }
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  options.cancel = stop.cancel();
  Progress progress(ModeOf(args.progress));
  options.order = args.order;
  options.progress = [&](const seedd::PullProgress& p) {
    if (!args.order.empty()) {
      for (const std::string& f : p.files_ready) {
        progress.Note("ready " + f,
                      {{"event", "file_ready"}, {"path", f}, {"at", (p.staging / f).string()}});
      }
    }
    progress.Show(p);
  };
  // Every failed round is said at once, the first one included.
  options.on_retry = [&](const std::string& why, std::chrono::milliseconds wait, int round,
                         std::chrono::milliseconds left) {
    char text[64];
    std::snprintf(text, sizeof(text), "; retrying in %.1f s (round %d, giving up in %.0f s)",
                  static_cast<double>(wait.count()) / 1000, round,
                  static_cast<double>(left.count()) / 1000);
    progress.Note(why + text, {{"event", "retry"},
                               {"why", why},
                               {"round", round},
                               {"retry_in_seconds", wait.count() / 1000.0},
                               {"gives_up_in_seconds", left.count() / 1000.0}});
  };
  seedd::Result<seedd::PullResult> pulled = seedd::PullModel(args.model, args.into, options);
  progress.End();
  if (pulled.ok()) {
    if (progress.json()) {
      const seedd::FetchStats& s = pulled->stats;
      Progress::Json({{"event", "done"},
                      {"model", args.model},
                      {"into", args.into},
                      {"root_digest", pulled->manifest.root_digest},
                      {"total_bytes", pulled->manifest.total_size},
                      {"files", pulled->manifest.files.size()},
                      {"seconds", pulled->seconds},
                      {"up_to_date", s.up_to_date},
                      {"bytes_received", s.bytes_received},
                      {"bytes_from_peers", s.bytes_from_peers},
                      {"bytes_resumed", s.bytes_resumed},
                      {"bytes_reused", s.bytes_reused},
                      {"chunks_rejected", s.chunks_rejected},
                      {"sources_dropped", s.sources_dropped}});
    } else {
      PrintSummary(args, pulled->manifest, pulled->stats, pulled->seconds);
    }
    return kExitOk;
  }
  if (progress.json()) {
    Progress::Json({{"event", "error"},
                    {"code", std::string(seedd::StatusCodeName(pulled.status().code()))},
                    {"message", pulled.status().message()}});
  }
  const seedd::Status& st = pulled.status();
  switch (st.code()) {
    case seedd::StatusCode::kCancelled:
      return Fail("stopped: " + st.message() + "; rerun the same command to resume",
                  kExitInterrupted);
    case seedd::StatusCode::kNotFound:
      return Fail(st.message(), kExitMiss);
    case seedd::StatusCode::kUnavailable:  // no source answered before --timeout
      if (st.message().rfind("the upstream to verify against", 0) == 0) {
        return Fail(st.message(), kExitError);  // --verify upstream=: the registry is down
      }
      return Fail(st.message() +
                  "; is the address right? (--wait SECONDS keeps trying longer "
                  "for sources that start later)");
    case seedd::StatusCode::kDeadlineExceeded:
      return Fail(st.message() + " (--timeout)", kExitError);
    default:
      return Fail(st.message(), kExitError);
  }
}

int RunOriginPull(const PullArgs& args) {
  if (!seedd::IsOriginUrl(args.from)) {
    return Fail("--from " + args.from +
                ": not a model's upstream (oci://REGISTRY/REPOSITORY:TAG or s3://BUCKET/PREFIX)");
  }
  if (seedd::Status form = seedd::CheckOriginUrl(args.from); !form.ok()) {
    return Fail("--from: " + form.message());
  }
  if (args.into.empty()) return Fail("--into is empty: name the directory to pull into");
  std::error_code ec;
  if (std::filesystem::absolute(args.into, ec).lexically_normal().filename().empty() || ec) {
    return Fail("--into " + args.into + ": not a directory name");
  }
  seedd::OriginPullOptions options;
  options.access.auth_file = args.origin_auth;
  options.access.ca_file = args.origin_ca;
  options.access.range_bytes = static_cast<uint64_t>(args.origin_range_mib * (1 << 20));
  options.replace = args.replace;
  for (const std::string& dir : args.reuse_from) {
    if (!std::filesystem::is_directory(dir, ec)) {
      return Fail("--reuse-from " + dir + ": not a directory");
    }
    options.reuse_from.emplace_back(dir);
  }
  // Shown as a pull from daemons is (a bar, lines or JSON events), the
  // upstream as its one source; Ctrl-C stops it with nothing moved in.
  StopOnSignal stop;
  options.cancel = stop.cancel();
  Progress progress(ModeOf(args.progress));
  options.progress = [&](uint64_t done, uint64_t total) {
    seedd::PullProgress p;
    p.verified_bytes = done;
    p.total_bytes = total;
    p.sources = 1;
    progress.Show(p);
  };
  seedd::Result<seedd::OriginCopy> copy = seedd::PullFromOrigin(args.from, args.into, options);
  progress.End();
  if (!copy.ok()) {
    const seedd::Status& st = copy.status();
    if (progress.json()) {
      Progress::Json({{"event", "error"},
                      {"code", std::string(seedd::StatusCodeName(st.code()))},
                      {"message", st.message()}});
    }
    switch (st.code()) {
      case seedd::StatusCode::kCancelled:
        return Fail("stopped: " + st.message() + "; nothing was moved into " + args.into,
                    kExitInterrupted);
      case seedd::StatusCode::kNotFound:
        return Fail(st.message(), kExitMiss);
      default:
        return Fail(st.message(), kExitError);
    }
  }
  if (progress.json()) {
    seedd::Json done = seedd::OriginPullJson(args.from, *copy);
    done["event"] = "done";
    Progress::Json(done);
    return kExitOk;
  }
  std::printf(
      "pulled %s (%s, %llu files, %s) into %s in %s: %s from upstream, %s reused locally; %s\n",
      args.from.c_str(), copy->version.c_str(), static_cast<unsigned long long>(copy->files),
      seedd::HumanBytes(copy->total_bytes).c_str(), copy->dir.c_str(),
      seedd::HumanSeconds(copy->seconds).c_str(), seedd::HumanBytes(copy->bytes_fetched).c_str(),
      seedd::HumanBytes(copy->bytes_reused).c_str(),
      copy->files_unverified == 0
          ? "every file matched its upstream digest"
          : (std::to_string(copy->files_unverified) +
             " file(s) had no upstream digest (multipart objects uploaded without a checksum)")
                .c_str());
  return kExitOk;
}

}  // namespace seedctl
