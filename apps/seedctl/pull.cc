// seedctl pull: a model's files from seedd daemons into a directory, retrying
// sources that are down (or go away) until --timeout, stopped cleanly by Ctrl-C.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "seedctl.h"
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

// Progress on a terminal: the rate and ETA count only the bytes moved by this
// run (a resumed pull starts with some verified).
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), start_(Clock::now()), last_(start_) {}
  void Show(uint64_t done, uint64_t resumed, size_t sources) {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double moved = static_cast<double>(done - std::min(done, resumed));
    double rate = secs > 0 ? moved / secs : 0;
    double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    std::fprintf(
        stderr, "\r%6.1f%%  %.1f / %.1f MiB  %.1f MB/s  ETA %.0f s  %zu source(s)   ",
        100.0 * static_cast<double>(done) / static_cast<double>(std::max<uint64_t>(1, total_)),
        done / 1048576.0, total_ / 1048576.0, rate / 1e6, eta, sources);
  }

 private:
  const uint64_t total_;
  const Clock::time_point start_;
  std::mutex mu_;
  Clock::time_point last_;  // GUARDED_BY(mu_)
};

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
  const uint64_t moved = m.total_size - std::min(m.total_size, stats.bytes_resumed);
  std::printf(
      "pulled %s (%zu files, %.1f MiB) from %zu source(s) and %zu relay(s) into %s in %.2f s "
      "(%.1f MB/s); %.1f MiB from relays, %llu chunk(s) resumed, %llu refetched, %llu hole(s)\n",
      args.model.c_str(), m.files.size(), m.total_size / 1048576.0, seeds, relays,
      args.into.c_str(), secs, moved / 1e6 / std::max(secs, 1e-9),
      stats.bytes_from_peers / 1048576.0, static_cast<unsigned long long>(stats.chunks_resumed),
      static_cast<unsigned long long>(stats.chunks_rejected),
      static_cast<unsigned long long>(stats.chunks_holes));
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
  options.replace = args.replace;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  options.cancel = stop.cancel();
  std::unique_ptr<Progress> progress;
  bool shown = false;
  if (::isatty(STDERR_FILENO) != 0) {
    options.progress = [&](const seedd::PullProgress& p) {
      if (progress == nullptr) progress = std::make_unique<Progress>(p.total_bytes);
      shown = true;
      progress->Show(p.verified_bytes, p.resumed_bytes, p.sources);
    };
  }
  options.on_retry = [&](const std::string& why, std::chrono::milliseconds wait, int round,
                         std::chrono::milliseconds left) {
    if (shown) std::fprintf(stderr, "\n");
    shown = false;
    std::fprintf(stderr, "seedctl: %s; retrying in %.1f s (round %d, giving up in %.0f s)\n",
                 why.c_str(), static_cast<double>(wait.count()) / 1000, round,
                 static_cast<double>(left.count()) / 1000);
  };
  seedd::Result<seedd::PullResult> pulled = seedd::PullModel(args.model, args.into, options);
  if (shown) std::fprintf(stderr, "\n");
  if (pulled.ok()) {
    PrintSummary(args, pulled->manifest, pulled->stats, pulled->seconds);
    return kExitOk;
  }
  const seedd::Status& st = pulled.status();
  switch (st.code()) {
    case seedd::StatusCode::kCancelled:
      return Fail("stopped: " + st.message() + "; rerun the same command to resume",
                  kExitInterrupted);
    case seedd::StatusCode::kNotFound:
      return Fail(st.message(), kExitMiss);
    case seedd::StatusCode::kUnavailable:  // no source answered before --timeout
      return Fail(st.message() + " (--timeout)");
    case seedd::StatusCode::kDeadlineExceeded:
      return Fail(st.message() + " (--timeout)", kExitError);
    default:
      return Fail(st.message(), kExitError);
  }
}

}  // namespace seedctl
