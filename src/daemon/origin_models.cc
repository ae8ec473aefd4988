#include "daemon/origin_models.h"

#include <chrono>
#include <condition_variable>
#include <thread>

#include "common/crypto.h"
#include "common/mutex.h"
#include "kinds/weights/net/registry.h"
#include "origins/materialize.h"
#include "origins/origin.h"
#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {
namespace {

constexpr std::chrono::milliseconds kLeaseTtl{30000};
constexpr std::chrono::milliseconds kLeaseRenew{10000};
constexpr std::chrono::milliseconds kRootTtl{24 * 3600 * 1000};
constexpr std::chrono::milliseconds kPoll{500};

// Keeps a claim in the registry renewed until destroyed.
class LeaseRenewer {
 public:
  LeaseRenewer(std::shared_ptr<SwarmRegistry> registry, std::string lease, std::string holder)
      : registry_(std::move(registry)), lease_(std::move(lease)), holder_(std::move(holder)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~LeaseRenewer() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;

 private:
  void Loop() {
    MutexLock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, kLeaseRenew, [this]() REQUIRES(mu_) { return stop_; });
      if (stop_) return;
      lock.Unlock();
      Result<bool> renewed = registry_->Renew(lease_, holder_, kLeaseTtl);
      if (!renewed.ok() || !*renewed) {
        Logger().warn(
            "Registry: could not renew the claim {} ({}); another daemon may fetch the same "
            "version from upstream",
            lease_, renewed.ok() ? "it lapsed" : renewed.status().message());
      }
      lock.Lock();
    }
  }

  const std::shared_ptr<SwarmRegistry> registry_;
  const std::string lease_;
  const std::string holder_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The model an origin URL names, fetched (or found held already) below
// <cache>/weights/origins/NAME/; the other models' copies there lend files with
// the same digest.
Result<std::filesystem::path> FetchOriginModel(const DaemonOptions& options,
                                               const std::string& name, const std::string& url,
                                               Origin& origin, const OriginModel& model) {
  const std::filesystem::path origins = options.cache_dir / "weights" / "origins";
  std::vector<std::filesystem::path> others;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(origins, ec)) {
    if (e.is_directory(ec) && e.path().filename() != name) others.push_back(e.path());
  }
  Logger().info("Fetching model {} from {}", name, url);
  auto last = std::make_shared<std::atomic<int64_t>>(0);
  const auto start = std::chrono::steady_clock::now();
  MaterializeOptions materialize;
  materialize.reuse_from = others;
  materialize.progress = [name, last, start](uint64_t done, uint64_t total) {
    // A line every 5 s of a long fetch.
    const int64_t now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
            .count();
    int64_t seen = last->load();
    if (now < seen + 5 || !last->compare_exchange_strong(seen, now)) return;
    Logger().info("Fetching model {}: {} of {}", name, HumanBytes(done), HumanBytes(total));
  };
  MaterializeStats stats;
  Result<std::filesystem::path> dir =
      MaterializeModel(origin, model, origins / name, materialize, &stats);
  if (!dir.ok()) return dir.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stats.already_here) {
    Logger().info("Model {} ({} {}) is held already in {}", name, url, model.version,
                  dir->string());
    return dir;
  }
  Logger().info("Fetched model {} ({}): {} files, {} from upstream, {} reused locally, in {}; {}",
                name, model.version, stats.files, HumanBytes(stats.bytes_fetched),
                HumanBytes(stats.bytes_reused), HumanSeconds(seconds),
                stats.files_unverified == 0 ? "every file matched its upstream digest"
                                            : "the others matched their upstream digests");
  if (stats.files_unverified > 0) {
    Logger().warn(
        "Model {}: {} of {} files had no upstream digest (multipart objects uploaded without a "
        "checksum): kept as the transport delivered them; upload with --checksum-algorithm "
        "SHA256 to have them verified",
        name, stats.files_unverified, stats.files);
  }
  return dir;
}

}  // namespace

Result<OriginModelPlan> PlanOriginModel(const DaemonOptions& options, const std::string& name,
                                        const std::string& url,
                                        const std::shared_ptr<SwarmRegistry>& registry,
                                        const std::shared_ptr<std::atomic<bool>>& cancel) {
  Result<OriginPtr> origin = OpenOrigin(url, options.origin_access);
  if (!origin.ok()) return origin.status();
  OriginModelPlan plan;
  const std::filesystem::path root = options.cache_dir / "weights" / "origins" / name;
  Result<OriginModel> model = (*origin)->Resolve();
  if (!model.ok()) {
    // An upstream that cannot be reached (down, a network partition) does not
    // stop a restart: the copy fetched last, still as recorded, is served.
    const StatusCode code = model.status().code();
    if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) {
      return model.status();
    }
    Result<HeldCopy> held = LatestHeldCopy(root, (*origin)->Url());
    if (!held.ok()) return model.status();
    Logger().warn(
        "Model {}: the upstream cannot be reached ({}); serving the copy fetched from it earlier, "
        "version {} in {}, which may not be the newest",
        name, model.status().message(), held->version, held->dir.string());
    plan.dir = held->dir;
    return plan;
  }
  if (registry == nullptr || HoldsVersion(root, *model)) {
    Result<std::filesystem::path> dir = FetchOriginModel(options, name, url, **origin, *model);
    if (!dir.ok()) return dir.status();
    plan.dir = *dir;
    return plan;
  }
  const std::string hex = model->version.substr(model->version.find(':') + 1);
  const std::string lease = "origin-lease:" + hex;
  const std::string published_key = "origin-root:" + hex;
  const std::string holder = RandomHexOrDie(8);
  const auto deadline = std::chrono::steady_clock::now() + options.pull_timeout;
  bool waiting_said = false;
  for (;;) {
    if (cancel != nullptr && cancel->load()) {
      return Status::Cancelled("stopped while waiting for the fleet's fetch of " + url);
    }
    // Fetched for the fleet already: pulled from the daemons holding it.
    Result<std::optional<std::string>> published = registry->Get(published_key);
    if (!published.ok()) return published.status().WithContext("--registry");
    if (published->has_value() && IsLowerHex(**published, 64)) {
      Result<std::vector<std::string>> holders = registry->Holders(**published, "", 16);
      if (holders.ok()) {
        for (const std::string& h : *holders) {
          if (Result<HostPort> hp = ParseHostPort(h); hp.ok()) plan.sources.push_back(*hp);
        }
      }
      if (!plan.sources.empty()) {
        plan.pull = name + "@" + **published;
        Logger().info(
            "Model {}: {} ({}) was fetched from upstream by another daemon of the fleet; pulling "
            "root digest {} from {} daemon(s) holding it",
            name, url, model->version, **published, plan.sources.size());
        return plan;
      }
    }
    // Else the first to claim the version fetches it; a claim whose holder died
    // lapses and is taken here.
    Result<bool> claimed = registry->Claim(lease, holder, kLeaseTtl);
    if (!claimed.ok()) return claimed.status().WithContext("--registry");
    if (*claimed) {
      auto renewer = std::make_shared<LeaseRenewer>(registry, lease, holder);
      Logger().info("Model {}: fetching {} from upstream for the fleet (claimed in the registry)",
                    name, url);
      Result<std::filesystem::path> dir = FetchOriginModel(options, name, url, **origin, *model);
      if (!dir.ok()) {
        renewer.reset();
        (void)registry->Release(lease, holder);  // another daemon may try at once
        return dir.status();
      }
      plan.dir = *dir;
      // Kept renewed until the root digest is published (after indexing); the
      // claim then lapses while the model is announced.
      plan.publish = [registry, published_key, renewer, name](const std::string& root_digest) {
        Status st = registry->Put(published_key, root_digest, kRootTtl);
        if (!st.ok()) {
          Logger().warn("Model {}: could not publish root digest {} in the registry: {}", name,
                        root_digest, st.message());
        }
      };
      return plan;
    }
    if (!waiting_said) {
      Logger().info(
          "Model {}: another daemon of the fleet is fetching {} ({}) from upstream; waiting to "
          "pull it from the fleet",
          name, url, model->version);
      waiting_said = true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::DeadlineExceeded("waited --pull-timeout (" +
                                      std::to_string(options.pull_timeout.count()) +
                                      " s) for the fleet's fetch of " + url);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace seedd
