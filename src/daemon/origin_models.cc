#include "daemon/origin_models.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <map>
#include <semaphore>
#include <set>
#include <thread>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/origin_landing.h"
#include "kinds/weights/files/chunk_set.h"
#include "kinds/weights/files/file_digests.h"
#include "kinds/weights/net/registry.h"
#include "origins/materialize.h"
#include "origins/origin.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "seedd/units.h"
#include "seedd/weights.h"

namespace seedd {
namespace {

constexpr std::chrono::milliseconds kLeaseTtl{30000};
constexpr std::chrono::milliseconds kLeaseRenew{10000};
constexpr std::chrono::milliseconds kRootTtl{24 * 3600 * 1000};

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
Result<std::filesystem::path> FetchOriginModel(
    const DaemonOptions& options, const std::string& name, const std::string& url, Origin& origin,
    const OriginModel& model, MaterializeOptions materialize = {},
    const std::function<std::string()>& fleet_said = {}) {
  const std::filesystem::path origins = options.cache_dir / "weights" / "origins";
  std::vector<std::filesystem::path> others;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(origins, ec)) {
    if (e.is_directory(ec) && e.path().filename() != name) others.push_back(e.path());
  }
  Logger().info("Fetching model {} from {}", name, url);
  auto last = std::make_shared<std::atomic<int64_t>>(0);
  const auto start = std::chrono::steady_clock::now();
  materialize.reuse_from = others;
  materialize.range_bytes = options.origin_access.range_bytes;
  materialize.range_streams = options.origin_access.range_streams;
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
  const std::string ranged =
      stats.ranged_gets == 0
          ? ""
          : " (large files as " + std::to_string(stats.ranged_gets) + " ranged GETs, " +
                std::to_string(options.origin_access.range_streams) + " at once)";
  Logger().info("Fetched model {} ({}): {} files, {}{} reused locally, in {}; {}", name,
                model.version, stats.files,
                fleet_said ? fleet_said()
                           : HumanBytes(stats.bytes_fetched) + " from upstream" + ranged + ", ",
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

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// All of `bytes` to `fd` (the file at `path`).
Status WriteBytes(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path.string(), errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// The pieces a large file travels as with the fleet: its ranged GETs
// (--origin-range-mib, `range`; 0: none), in whole chunks of `chunk` bytes so
// that a piece's chunk digests are the model's.
uint64_t PieceBytes(uint64_t range, uint64_t chunk) {
  if (range == 0) return std::numeric_limits<uint64_t>::max();
  chunk = std::max<uint64_t>(chunk, 1);
  return std::max<uint64_t>(1, (range + chunk - 1) / chunk) * chunk;
}

constexpr size_t kMaxPartRecord = 64 << 20;  // a part's manifest: 64 MiB at most

std::string HexOfVersion(const std::string& version) {
  return version.substr(version.find(':') + 1);
}

BuildOptions PartBuild(BuildOptions build, const OriginModel& model) {
  if (build.chunk_size == 0) build.chunk_size = AutoChunkBytes(model.total_size);
  build.sign_key = nullptr;  // parts are checked against upstream digests, not signatures
  return build;
}

// The upstream as the fleet shares it: each file from the daemon that claimed
// it in the registry (fetched from upstream there) or from upstream here when
// this daemon claims it first. Every file still lands through MaterializeModel,
// which checks it against its upstream digest.
class FleetOrigin final : public Origin {
 public:
  // Bytes [offset, offset + length) of a file.
  struct Piece {
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  FleetOrigin(const DaemonOptions& options, std::string name, OriginPtr upstream,
              const OriginModel& model, FleetContext fleet, std::filesystem::path parts)
      : options_(options),
        name_(std::move(name)),
        upstream_(std::move(upstream)),
        model_(model),
        hex_(HexOfVersion(model.version)),
        fleet_(std::move(fleet)),
        parts_(std::move(parts)),
        holder_(RandomHexOrDie(8)),
        part_build_(PartBuild(fleet_.build, model)),
        piece_bytes_(PieceBytes(options.origin_access.range_bytes, part_build_.chunk_size)) {
    for (size_t i = 0; i < model_.files.size(); ++i) index_.emplace(model_.files[i].path, i);
  }

  std::string Url() const override { return upstream_->Url(); }
  Result<OriginModel> Resolve() override { return upstream_->Resolve(); }

  // Called when FetchLocal found that this daemon claimed the file: fetched
  // from upstream here.
  Result<std::string> Fetch(const OriginFile& file,
                            const std::function<Status(std::string_view)>& sink) override {
    const auto it = index_.find(file.path);
    if (it == index_.end()) return Status::Internal("no file " + file.path + " in the listing");
    const size_t k = it->second;
    Claim claim;
    {
      MutexLock lock(mu_);
      auto c = claiming_.find(k);
      if (c == claiming_.end()) return Status::Internal(file.path + " was not claimed here");
      claim = std::move(c->second);
      claiming_.erase(c);
    }
    return FetchUpstream(k, file, std::move(claim), sink);
  }

  // The file from the daemon that fetched it from upstream, once published
  // there; nullopt when this daemon claimed it first (then Fetch brings it).
  Result<std::optional<LocalBytes>> FetchLocal(const OriginFile& file) override {
    const auto it = index_.find(file.path);
    if (it == index_.end()) return Status::Internal("no file " + file.path + " in the listing");
    const size_t k = it->second;
    if (InPieces(file)) return FetchInPieces(k, file, Pieces(file));
    const std::string part_key = Key("origin-part", k);
    const auto deadline = std::chrono::steady_clock::now() + options_.pull_timeout;
    // When a published part was first seen with nobody holding it (max: not so).
    auto no_holders_since = std::chrono::steady_clock::time_point::max();
    bool said = false;
    for (;;) {
      SEEDD_RETURN_IF_ERROR(Stopped(file));
      Result<std::optional<Part>> read = ReadPart(part_key, file, Piece{0, file.size});
      if (!read.ok()) return read.status();
      std::optional<Part>& part = *read;
      if (part.has_value()) {
        Result<std::vector<std::string>> holders =
            fleet_.registry->Holders(part->manifest.root_digest, fleet_.relay, 16);
        if (holders.ok() && !holders->empty()) {
          no_holders_since = std::chrono::steady_clock::time_point::max();
          Result<std::filesystem::path> pulled = PullPart(std::to_string(k), file, *part, *holders);
          if (pulled.ok()) {
            MutexLock lock(mu_);
            pulled_[k] = {part->manifest, *pulled};
            return std::optional<LocalBytes>(LocalBytes{
                *pulled / file.path, file.digest.empty() ? part->expected : file.digest});
          }
          if (pulled.status().code() == StatusCode::kCancelled) return pulled.status();
          Logger().warn("Model {}: pulling {} from the fleet failed ({}); trying again", name_,
                        file.path, pulled.status().message());
        } else if (no_holders_since == std::chrono::steady_clock::time_point::max()) {
          no_holders_since = std::chrono::steady_clock::now();
        }
      }
      // Not published (or published by daemons all gone for 5 s): the first to
      // claim the file fetches it from upstream.
      const bool orphaned = part.has_value() &&
                            no_holders_since != std::chrono::steady_clock::time_point::max() &&
                            std::chrono::steady_clock::now() - no_holders_since > kOrphaned;
      if (!part.has_value() || orphaned) {
        Result<std::optional<Claim>> claim = ClaimFile(k, file, orphaned);
        if (!claim.ok()) return claim.status();
        if (claim->has_value()) {
          MutexLock lock(mu_);
          claiming_[k] = std::move(**claim);
          return std::optional<LocalBytes>();
        }
      }
      SEEDD_RETURN_IF_ERROR(WaitForFleet(file, "", deadline, &said));
    }
  }

  // One poll's wait for a file other daemons fetch from upstream (`how`: "" or
  // " in pieces"), said once; DeadlineExceeded after --pull-timeout.
  Status WaitForFleet(const OriginFile& file, const char* how,
                      std::chrono::steady_clock::time_point deadline, bool* said) {
    if (!*said) {
      Logger().info(
          "Model {}: {} is being fetched from upstream by another daemon of the fleet{}; "
          "waiting to pull it from there",
          name_, file.path, how);
      *said = true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::DeadlineExceeded(
          "waited --pull-timeout (" + std::to_string(options_.pull_timeout.count()) +
          " s) for the fleet's fetch of " + file.path + " of " + model_.url);
    }
    std::this_thread::sleep_for(kPartPoll);
    return Status::Ok();
  }

  // A file over the piece size travels as pieces, each fetched from upstream by
  // one daemon (a ranged GET) and shared as soon as it lands, so the fleet pulls
  // the first pieces of a large file while its last are still upstream. Every
  // daemon puts the pieces together and checks the whole file against its
  // upstream digest before taking it.
  Result<std::optional<LocalBytes>> FetchInPieces(size_t k, const OriginFile& file,
                                                  const std::vector<Piece>& pieces) {
    std::vector<std::optional<std::filesystem::path>> have(pieces.size());
    std::vector<Manifest> manifests(pieces.size());
    std::string expected = file.digest;
    // When a published piece was first seen with nobody holding it (max: not so).
    std::vector<std::chrono::steady_clock::time_point> no_holders_since(
        pieces.size(), std::chrono::steady_clock::time_point::max());
    const auto deadline = std::chrono::steady_clock::now() + options_.pull_timeout;
    bool said = false;
    std::vector<std::set<std::string>> tried_landing(pieces.size());
    for (;;) {
      SEEDD_RETURN_IF_ERROR(Stopped(file));
      bool moved = false;
      size_t missing = 0;
      for (size_t p = 0; p < pieces.size(); ++p) {
        if (have[p].has_value()) continue;
        ++missing;
        const std::string key = PieceKey("origin-part", k, p);
        Result<std::optional<Part>> read = ReadPart(key, file, pieces[p]);
        if (!read.ok()) return read.status();
        std::optional<Part>& part = *read;
        if (part.has_value()) {
          Result<std::vector<std::string>> holders =
              fleet_.registry->Holders(part->manifest.root_digest, fleet_.relay, 16);
          if (holders.ok() && !holders->empty()) {
            no_holders_since[p] = std::chrono::steady_clock::time_point::max();
            const std::string id = PieceId(k, p);
            const auto start = std::chrono::steady_clock::now();
            Result<std::filesystem::path> pulled = PullPart(id, file, *part, *holders);
            if (pulled.ok()) {
              Logger().info("Model {}: pulled piece {} of {} ({}) from the fleet in {}", name_, p,
                            file.path, HumanBytes(pieces[p].length),
                            HumanSeconds(SecondsSince(start)));
              ServePulled(part->manifest, *pulled, file, pieces[p]);
              have[p] = *pulled / file.path;
              manifests[p] = std::move(part->manifest);
              if (expected.empty()) expected = part->expected;
              moved = true;
              --missing;
              continue;
            }
            if (pulled.status().code() == StatusCode::kCancelled) return pulled.status();
            Logger().warn(
                "Model {}: pulling piece {} of {} from the fleet failed ({}); trying again", name_,
                p, file.path, pulled.status().message());
          } else if (no_holders_since[p] == std::chrono::steady_clock::time_point::max()) {
            no_holders_since[p] = std::chrono::steady_clock::now();
          }
        }
        // Not published (or published by daemons all gone for 5 s): the first to
        // claim the piece fetches it from upstream.
        const bool orphaned = part.has_value() &&
                              no_holders_since[p] != std::chrono::steady_clock::time_point::max() &&
                              std::chrono::steady_clock::now() - no_holders_since[p] > kOrphaned;
        if (part.has_value() && !orphaned) continue;
        Result<std::optional<Claim>> claim = ClaimPart(
            PieceKey("origin-lease", k, p), key, PieceId(k, p),
            [&](const std::string& text) { return ParsePart(text, file, pieces[p]).ok(); },
            orphaned);
        if (!claim.ok()) return claim.status();
        if (!claim->has_value()) {
          // Claimed by another daemon: pulled from it while it lands there.
          if (part.has_value()) continue;
          auto landed = PullLanding(k, p, file, pieces[p], &tried_landing[p]);
          if (!landed.ok()) return landed.status();
          if (!landed->has_value()) continue;
          auto& [pulled_dir, landed_part] = **landed;
          ServePulled(landed_part.manifest, pulled_dir, file, pieces[p]);
          have[p] = pulled_dir / file.path;
          manifests[p] = std::move(landed_part.manifest);
          if (expected.empty()) expected = landed_part.expected;
          moved = true;
          --missing;
          continue;
        }
        Result<Manifest> fetched =
            FetchPieceUpstream(k, p, file, pieces[p], std::move(**claim), &expected);
        if (!fetched.ok()) return fetched.status();
        have[p] = parts_ / PieceId(k, p) / file.path;
        manifests[p] = std::move(*fetched);
        moved = true;
        --missing;
      }
      if (missing == 0) break;
      if (!moved) SEEDD_RETURN_IF_ERROR(WaitForFleet(file, " in pieces", deadline, &said));
    }
    // The pieces put together: a file of its own, linked into the model once it
    // matches the upstream digest (MaterializeModel checks it).
    const std::filesystem::path whole = parts_ / ("whole-" + std::to_string(k));
    SEEDD_RETURN_IF_ERROR(Assemble(have, pieces, whole));
    {
      MutexLock lock(mu_);
      pieces_[k] = std::move(manifests);
    }
    return std::optional<LocalBytes>(LocalBytes{whole, expected});
  }

  // MaterializeOptions::landed: the file is complete and checked; it is served as
  // a part from here on, and published when fetched from upstream here.
  void Landed(size_t k, const std::filesystem::path& path, const std::string& sha256) {
    const OriginFile& file = model_.files[k];
    std::optional<std::vector<Manifest>> pieces;
    {
      MutexLock lock(mu_);
      if (auto it = pieces_.find(k); it != pieces_.end()) {
        pieces = std::move(it->second);
        pieces_.erase(it);
      }
    }
    if (pieces.has_value()) {
      KnowPieces(k, *pieces, sha256);
      ServePiecesFromWhole(k, std::move(*pieces));
      return;
    }
    const std::filesystem::path dir = parts_ / std::to_string(k);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories((dir / file.path).parent_path(), ec);
    std::filesystem::create_hard_link(path, dir / file.path, ec);
    if (ec) {
      Logger().warn("Model {}: cannot serve {} to the fleet before the model is complete: {}",
                    name_, file.path, ec.message());
      return;
    }
    std::optional<Claimed> claimed;
    std::optional<Manifest> pulled;
    std::filesystem::path pull_dir;
    {
      MutexLock lock(mu_);
      if (auto c = claimed_.find(k); c != claimed_.end()) {
        claimed = std::move(c->second);
        claimed_.erase(c);
      }
      if (auto p = pulled_.find(k); p != pulled_.end()) {
        pulled = std::move(p->second.first);
        pull_dir = std::move(p->second.second);
        pulled_.erase(p);
      }
    }
    if (pulled.has_value()) {
      Know(k, *pulled, sha256);
      // The part's manifest as pulled: the same bytes, served from here now.
      ServedModel served;
      served.manifest = std::move(*pulled);
      served.dir = dir;
      struct stat st {};
      if (::stat((dir / file.path).c_str(), &st) == 0) {
        served.files[file.path] =
            IndexedFile{file.path, static_cast<uint64_t>(st.st_size), MtimeNs(st)};
      }
      served.pulled = true;
      fleet_.server->Publish(std::move(served));
      std::filesystem::remove_all(pull_dir, ec);
      return;
    }
    Result<IndexedModel> indexed = IndexModel(PartName(k), dir, part_build_);
    if (!indexed.ok()) {
      Logger().warn("Model {}: cannot serve {} to the fleet before the model is complete: {}",
                    name_, file.path, indexed.status().message());
      if (claimed.has_value()) Release(claimed->claim);
      return;
    }
    Know(k, indexed->manifest, sha256);
    const Json record = {{"manifest", indexed->manifest.ToJson()},
                         {"expected", claimed.has_value() ? claimed->expected : file.digest}};
    fleet_.server->Publish(ServeIndexed(std::move(*indexed)));
    if (!claimed.has_value()) return;  // copied from a local copy: the fleet is not waiting on it
    Status put = fleet_.registry->Put(Key("origin-part", k), DumpJson(record), kRootTtl);
    if (!put.ok()) {
      Logger().warn("Model {}: could not publish {} in the registry: {}", name_, file.path,
                    put.message());
    }
    Release(claimed->claim);
  }

  // File `k` did not land (a digest that did not match, a disk error): its
  // claim, if this daemon took one, is given up for another daemon to fetch the
  // file, and this daemon's waits for other files end (the fetch has failed).
  void Failed(size_t k, const Status& why) {
    std::optional<Claimed> claimed;
    if (why.code() == StatusCode::kDataLoss) ForgetPieces(k);
    {
      MutexLock lock(mu_);
      pieces_.erase(k);
      failed_ = why;
      if (auto c = claimed_.find(k); c != claimed_.end()) {
        claimed = std::move(c->second);
        claimed_.erase(c);
      }
    }
    upstream_done_.notify_all();
    if (claimed.has_value()) Release(claimed->claim);
  }

  // The digests of every file landed, for the model's index in `dir` (its final
  // directory) not to read them again: a part's chunks are the model's.
  void RememberDigests(const std::filesystem::path& dir) {
    MutexLock lock(mu_);
    for (const auto& [k, d] : digests_) {
      ::seedd::RememberDigests(dir / model_.files[k].path, part_build_, d);
    }
  }

  // "N from upstream (P parts), M from the fleet (Q parts), ": a part is a
  // file, or a piece of a large one.
  std::string Said() const {
    return HumanBytes(from_upstream_.load()) + " from upstream (" +
           std::to_string(parts_upstream_.load()) + " parts), " + HumanBytes(from_fleet_.load()) +
           " from the fleet (" + std::to_string(parts_fleet_.load()) + " parts), ";
  }

 private:
  static constexpr std::chrono::milliseconds kPartPoll{200};
  static constexpr std::chrono::milliseconds kOrphaned{5000};
  // How often a pull of a landing piece checks that its fetch from upstream
  // goes on (PullLanding).
  static constexpr std::chrono::milliseconds kLandingWatch{500};
  // Files fetched from upstream at once across the fleet: few, so that the
  // first files are complete (and swarmed) early rather than all at the end.
  static constexpr int kUpstreamStreams = 2;

  struct Part {
    Manifest manifest;
    std::string expected;
  };

  // A file's claim and the upstream slot it uses, renewed until released.
  struct Claim {
    std::string who;
    std::vector<std::string> names;
    std::vector<std::shared_ptr<LeaseRenewer>> renewers;
  };
  struct Claimed {
    Claim claim;
    std::string expected;
  };

  // The digests of file `k`: its chunks' as `part` (its one-file manifest,
  // every chunk checked against it) gives them, when chunked as the whole model
  // is, and the SHA-256 computed here as it landed (`sha256`, "sha256:<hex>"),
  // never a peer's word for it.
  void Know(size_t k, const Manifest& part, const std::string& sha256) {
    if (part.chunk_size != part_build_.chunk_size ||
        part.chunk_digest != part_build_.chunk_digest || part.files.size() != 1) {
      return;
    }
    FileDigests d;
    d.size = part.files[0].size;
    d.sha256 = sha256.substr(sha256.find(':') + 1);
    for (const ManifestChunk& c : part.chunks) d.chunks.push_back(c.digest);
    MutexLock lock(mu_);
    digests_[k] = std::move(d);
  }

  // The pieces of file `k`, served from where they were fetched or pulled, are
  // served from the whole file (parts_/whole-K, a link of the model's copy) from
  // now on, and their own copies removed: a file's bytes are on disk once.
  void ServePiecesFromWhole(size_t k, std::vector<Manifest> manifests) {
    const OriginFile& file = model_.files[k];
    const std::string whole = "whole-" + std::to_string(k);
    struct stat st {};
    if (::stat((parts_ / whole).c_str(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != file.size) {
      return;  // served from their own copies still
    }
    const std::vector<Piece> pieces = Pieces(file);
    for (size_t p = 0; p < pieces.size() && p < manifests.size(); ++p) {
      ServedModel served;
      served.manifest = std::move(manifests[p]);
      served.dir = parts_;
      served.files[file.path] = IndexedFile{whole, file.size, MtimeNs(st), pieces[p].offset};
      fleet_.server->Publish(std::move(served));
      // The piece as it was served while it landed (fetched here, or pulled
      // and relayed), complete now: from the whole file too, so that a daemon
      // still pulling it from here finishes rather than finding its chunks gone.
      if (std::shared_ptr<const ServedModel> landing =
              fleet_.server->FindModel(PieceName(k, p) + "-landing")) {
        ServedModel whole_landing;
        whole_landing.manifest = landing->manifest;
        whole_landing.dir = parts_;
        whole_landing.files[file.path] =
            IndexedFile{whole, file.size, MtimeNs(st), pieces[p].offset};
        whole_landing.pulled = landing->pulled;
        fleet_.server->Publish(std::move(whole_landing));
      }
      std::error_code ec;
      std::filesystem::remove_all(parts_ / PieceId(k, p), ec);
      std::filesystem::remove_all(parts_ / ("pull-" + PieceId(k, p)), ec);
      std::filesystem::remove_all(parts_ / ("landing-" + PieceId(k, p)), ec);
    }
  }

  // Know for a file fetched in pieces: their chunk digests, one after another.
  void KnowPieces(size_t k, const std::vector<Manifest>& pieces, const std::string& sha256) {
    FileDigests d;
    d.size = model_.files[k].size;
    d.sha256 = sha256.substr(sha256.find(':') + 1);
    for (const Manifest& piece : pieces) {
      if (piece.chunk_size != part_build_.chunk_size ||
          piece.chunk_digest != part_build_.chunk_digest || piece.files.size() != 1) {
        return;
      }
      for (const ManifestChunk& c : piece.chunks) d.chunks.push_back(c.digest);
    }
    MutexLock lock(mu_);
    digests_[k] = std::move(d);
  }

  // File `k` put together from its pieces did not match its upstream digest:
  // the records of its pieces (as they are now) are dropped, so that the next
  // try fetches them from upstream again rather than pulling the same bytes.
  void ForgetPieces(size_t k) {
    const std::vector<Piece> pieces = Pieces(model_.files[k]);
    if (!InPieces(model_.files[k])) return;
    for (size_t p = 0; p < pieces.size(); ++p) {
      const std::string key = PieceKey("origin-part", k, p);
      Result<std::optional<std::string>> record = fleet_.registry->Get(key, kMaxPartRecord);
      if (record.ok() && record->has_value()) (void)fleet_.registry->Release(key, **record);
    }
    Logger().warn("Model {}: dropped the fleet's records of the pieces of {}", name_,
                  model_.files[k].path);
  }

  // The registry key KIND:<version hex>:<n> (origin_models.h).
  std::string Key(const char* kind, size_t n) const {
    return std::string(kind) + ":" + hex_ + ":" + std::to_string(n);
  }

  std::string PartName(size_t k) const {
    return "seedd-part-" + hex_.substr(0, 16) + "-" + std::to_string(k);
  }

  // A part record from the registry (peer input): a manifest of one file, this
  // one, of `piece`'s size, at its offset ("offset", 0 when absent).
  Result<Part> ParsePart(const std::string& text, const OriginFile& file,
                         const Piece& piece) const {
    Result<Json> j = ParseJson(text);
    if (!j.ok()) return j.status();
    if (!j->is_object() || !j->contains("manifest") || !j->contains("expected") ||
        !(*j)["expected"].is_string()) {
      return Status::InvalidArgument("not a part record ({\"manifest\", \"expected\"})");
    }
    const Json offset = j->value("offset", Json(uint64_t{0}));
    if (!offset.is_number_unsigned() || offset.get<uint64_t>() != piece.offset) {
      return Status::InvalidArgument("its offset is not " + std::to_string(piece.offset));
    }
    Result<Manifest> m = ParseManifest((*j)["manifest"]);
    if (!m.ok()) return m.status();
    if (m->files.size() != 1 || m->files[0].path != file.path || m->files[0].size != piece.length) {
      return Status::InvalidArgument("its manifest is not of " + file.path + " (" +
                                     std::to_string(piece.length) + " bytes) alone");
    }
    return Part{std::move(*m), (*j)["expected"].get<std::string>()};
  }

  // The record at `key` of `piece` of `file` when there is one that holds up
  // (ParsePart); one that does not is said and taken for none.
  Result<std::optional<Part>> ReadPart(const std::string& key, const OriginFile& file,
                                       const Piece& piece) {
    Result<std::optional<std::string>> published = fleet_.registry->Get(key, kMaxPartRecord);
    if (!published.ok()) return published.status().WithContext("--registry");
    if (!published->has_value()) return std::optional<Part>();
    Result<Part> parsed = ParsePart(**published, file, piece);
    if (!parsed.ok()) {
      Logger().warn("Model {}: ignoring the registry's {}: {}", name_, key,
                    parsed.status().message());
      return std::optional<Part>();
    }
    return std::optional<Part>(std::move(*parsed));
  }

  // The pieces of `file`: one (the whole file) unless it is over the piece
  // size and its upstream digest is known before a whole GET (ranged GETs).
  std::vector<Piece> Pieces(const OriginFile& file) const {
    if (file.size <= piece_bytes_ || file.digest.empty()) return {Piece{0, file.size}};
    std::vector<Piece> pieces;
    for (uint64_t at = 0; at < file.size; at += piece_bytes_) {
      pieces.push_back(Piece{at, std::min(piece_bytes_, file.size - at)});
    }
    return pieces;
  }

  // Whether a file of one piece travels as a piece all the same (FetchInPieces),
  // so that the fleet pulls it while it lands: its upstream digest is known (it
  // is checked whole by every daemon) and it has more than one chunk (one
  // chunk gains nothing from being served while it lands).
  bool Landable(const OriginFile& file) const {
    return !file.digest.empty() && !fleet_.relay.empty() && file.size > part_build_.chunk_size;
  }

  // Whether `file` travels as pieces (FetchInPieces), one or more.
  bool InPieces(const OriginFile& file) const { return Pieces(file).size() > 1 || Landable(file); }

  // KIND:<version hex>:<file>.<piece>
  std::string PieceKey(const char* kind, size_t k, size_t p) const {
    return std::string(kind) + ":" + hex_ + ":" + PieceId(k, p);
  }
  static std::string PieceId(size_t k, size_t p) {
    return std::to_string(k) + "." + std::to_string(p);
  }

  // Serves a part pulled into `dir` (its one file there) from here on.
  void ServePulled(Manifest manifest, const std::filesystem::path& dir, const OriginFile& file,
                   const Piece& piece) {
    ServedModel served;
    served.manifest = std::move(manifest);
    served.dir = dir;
    struct stat st {};
    if (::stat((dir / file.path).c_str(), &st) == 0 &&
        static_cast<uint64_t>(st.st_size) == piece.length) {
      served.files[file.path] = IndexedFile{file.path, piece.length, MtimeNs(st)};
    }
    served.pulled = true;
    fleet_.server->Publish(std::move(served));
  }

  // Piece `p` of file `k` from upstream (a ranged GET) into its part's
  // directory, indexed, served and published; its manifest. *expected: the
  // whole file's digest, as the upstream gives it.
  Result<Manifest> FetchPieceUpstream(size_t k, size_t p, const OriginFile& file,
                                      const Piece& piece, Claim claim, std::string* expected) {
    struct Releasing {
      FleetOrigin* self;
      Claim& claim;
      ~Releasing() { self->Release(claim); }
    } releasing{this, claim};
    const std::string id = PieceId(k, p);
    const std::filesystem::path dir = parts_ / id;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories((dir / file.path).parent_path(), ec);
    if (ec) return Status::IoError("create " + dir.string() + ": " + ec.message());
    const std::filesystem::path path = dir / file.path;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return ErrnoStatus("create " + path.string(), errno);
    Logger().info("Model {}: fetching piece {} of {} ({} at {}) from upstream for the fleet", name_,
                  p, file.path, HumanBytes(piece.length), piece.offset);
    const auto start = std::chrono::steady_clock::now();
    // Served while it lands, as a model of its own (LiveManifest) read from this
    // file, each chunk once its digest is in the live record.
    std::optional<LiveLanding> live;
    if (!fleet_.relay.empty()) {
      ServedModel served;
      served.manifest = LiveManifest(k, p, file, piece);
      served.dir = dir;
      auto available = std::make_shared<ChunkSet>(served.manifest.chunks.size());
      served.available = available;
      const Json head = {{"root", served.manifest.root_digest},
                         {"holder", fleet_.relay},
                         {"offset", piece.offset},
                         {"length", piece.length}};
      live.emplace(fleet_.registry, PieceKey("origin-live", k, p), PieceKey("origin-digests", k, p),
                   DumpJson(head), available, served.manifest);
      fleet_.server->Publish(std::move(served));
    }
    uint64_t written = 0;
    Result<std::string> digest =
        upstream_->FetchRange(file, piece.offset, piece.length, [&](std::string_view bytes) {
          if (written + bytes.size() > piece.length) {
            return Status::DataLoss(file.path + ": the upstream sent more than the range asked");
          }
          SEEDD_RETURN_IF_ERROR(WriteBytes(fd.get(), bytes, path));
          if (live.has_value()) live->Landed(bytes);
          written += bytes.size();
          from_upstream_ += bytes.size();
          return Status::Ok();
        });
    if (!digest.ok()) return digest.status().WithContext(file.path + " from " + model_.url);
    if (written != piece.length) {
      return Status::DataLoss(file.path + ": the upstream sent " + std::to_string(written) +
                              " bytes of a range of " + std::to_string(piece.length));
    }
    if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path.string(), errno);
    fd.Reset();
    if (expected->empty()) *expected = *digest;
    Result<IndexedModel> indexed = IndexModel(PieceName(k, p), dir, part_build_);
    if (!indexed.ok()) return indexed.status().WithContext(file.path);
    Manifest manifest = indexed->manifest;
    const Json record = {
        {"manifest", manifest.ToJson()}, {"expected", *digest}, {"offset", piece.offset}};
    fleet_.server->Publish(ServeIndexed(std::move(*indexed)));
    const std::string text = DumpJson(record);
    Status put = fleet_.registry->Put(PieceKey("origin-part", k, p), text, kRootTtl);
    if (!put.ok()) {
      Logger().warn("Model {}: could not publish piece {} of {} in the registry: {}", name_, p,
                    file.path, put.message());
    }
    ++parts_upstream_;
    Logger().info("Model {}: piece {} of {} fetched from upstream and published in {}", name_, p,
                  file.path, HumanSeconds(SecondsSince(start)));
    return manifest;
  }

  // The pieces at `have` (by piece) into one new file at `whole`.
  static Status Assemble(const std::vector<std::optional<std::filesystem::path>>& have,
                         const std::vector<Piece>& pieces, const std::filesystem::path& whole) {
    std::error_code ec;
    std::filesystem::remove(whole, ec);
    // One piece is the whole file: a link of it (the piece's own copy is
    // removed once the file is served whole, ServePiecesFromWhole).
    if (pieces.size() == 1) {
      std::filesystem::create_hard_link(*have[0], whole, ec);
      if (!ec) return Status::Ok();
    }
    UniqueFd out(::open(whole.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!out.valid()) return ErrnoStatus("create " + whole.string(), errno);
    for (size_t p = 0; p < pieces.size(); ++p) {
      UniqueFd in(::open(have[p]->c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!in.valid()) return ErrnoStatus("open " + have[p]->string(), errno);
      loff_t from = 0;
      loff_t to = static_cast<loff_t>(pieces[p].offset);
      uint64_t left = pieces[p].length;
      while (left > 0) {
        // copy_file_range: a reflink where the file system can.
        const ssize_t n = ::copy_file_range(in.get(), &from, out.get(), &to, left, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoStatus("copy " + have[p]->string(), errno);
        if (n == 0) return Status::DataLoss(have[p]->string() + " is shorter than its piece");
        left -= static_cast<uint64_t>(n);
      }
    }
    return Status::Ok();
  }

  // The model piece `p` of file `k` is served as while it lands upstream: the
  // piece's chunks as the part will have them, without their digests, named by
  // the version and the piece (the same on every daemon; no content digest is
  // known yet).
  Manifest LiveManifest(size_t k, size_t p, const OriginFile& file, const Piece& piece) const {
    Manifest m;
    m.model = PieceName(k, p) + "-landing";
    m.chunk_size = part_build_.chunk_size;
    m.chunk_digest = part_build_.chunk_digest;
    m.total_size = piece.length;
    m.files.push_back(ManifestFile{file.path, piece.length, ""});
    for (uint64_t at = 0; at < piece.length; at += m.chunk_size) {
      m.chunks.push_back(
          ManifestChunk{file.path, at, std::min(m.chunk_size, piece.length - at), ""});
    }
    m.root_digest = Sha256Hex("seedd-landing:" + hex_ + ":" + PieceId(k, p));
    return m;
  }

  std::string PieceName(size_t k, size_t p) const {
    return "seedd-part-" + hex_.substr(0, 16) + "-" + PieceId(k, p);
  }

  // Cancelled when the daemon stops or another file of the model failed.
  Status Stopped(const OriginFile& file) {
    if (fleet_.install.cancel != nullptr && fleet_.install.cancel->load()) {
      return Status::Cancelled("stopped while fetching " + file.path + " with the fleet");
    }
    MutexLock lock(mu_);
    if (!failed_.ok()) {
      return Status::Cancelled("not waiting for " + file.path + ": " + failed_.message());
    }
    return Status::Ok();
  }

  // Pulls `part` (`id`: a file's index, or FILE.PIECE) from `holders`
  // (relaying it meanwhile); returns the directory it is in.
  Result<std::filesystem::path> PullPart(const std::string& id, const OriginFile& file,
                                         const Part& part,
                                         const std::vector<std::string>& holders) {
    std::vector<HostPort> sources;
    for (const std::string& h : holders) {
      if (Result<HostPort> hp = ParseHostPort(h); hp.ok()) sources.push_back(*hp);
    }
    return PullInto("pull-" + id, file, part.manifest, std::move(sources));
  }

  // Pulls `manifest` from `sources` into parts_/`name`; `digest_of` as
  // FetchOptions'; `cancel`, when given, stops it (in place of the daemon's).
  Result<std::filesystem::path> PullInto(const std::string& name, const OriginFile& file,
                                         const Manifest& manifest, std::vector<HostPort> sources,
                                         std::function<std::string(uint32_t)> digest_of = {},
                                         std::shared_ptr<const std::atomic<bool>> cancel = {}) {
    WeightInstallOptions install = fleet_.install;
    if (cancel != nullptr) install.cancel = std::move(cancel);
    install.sources = std::move(sources);
    install.digest_of = std::move(digest_of);
    install.board = nullptr;
    // No part pull starts while this daemon fetches from upstream: the fleet
    // waits on that part, and pulls from many peers would take most of this
    // host's downlink from its one upstream stream.
    {
      MutexLock lock(mu_);
      while (upstream_active_ > 0) {
        lock.Unlock();
        SEEDD_RETURN_IF_ERROR(Stopped(file));
        lock.Lock();
        upstream_done_.wait_for(lock, kPartPoll);
      }
    }
    // Two parts at a time: one fills the link while the other starts or ends;
    // each already fetches from many peers at once.
    pulls_.acquire();
    struct Done {
      std::counting_semaphore<2>& s;
      ~Done() { s.release(); }
    } done{pulls_};
    // One place per part: a pull that failed mid-way resumes from its journal.
    const std::filesystem::path dir = parts_ / name;
    SEEDD_RETURN_IF_ERROR(FetchAndRelay(fleet_.server, install, manifest, fleet_.relay, dir));
    from_fleet_ += manifest.total_size;
    ++parts_fleet_;
    return dir;
  }

  // Piece `p` of file `k` pulled from the daemon fetching it from upstream while
  // it lands there (its live record), relaying it meanwhile, each chunk checked
  // against the digest that daemon published for it; then the part it published
  // once the piece landed, which must list the same digests. nullopt when there
  // is no live record, or the pull did not end so (the caller goes on as
  // before: the part is pulled, or claimed, once published).
  // `tried`: the daemons this piece was tried from while it landed (each is
  // tried once).
  Result<std::optional<std::pair<std::filesystem::path, Part>>> PullLanding(
      size_t k, size_t p, const OriginFile& file, const Piece& piece,
      std::set<std::string>* tried) {
    using Pulled = std::optional<std::pair<std::filesystem::path, Part>>;
    const Manifest manifest = LiveManifest(k, p, file, piece);
    auto digests = std::make_shared<LiveDigests>(
        fleet_.registry, PieceKey("origin-live", k, p), PieceKey("origin-digests", k, p),
        manifest.root_digest, piece.offset, piece.length, manifest.chunks.size(),
        manifest.chunk_digest == ChunkDigest::kSha256 ? 64 : 32);
    Result<std::optional<HostPort>> holder = digests->Read();
    if (!holder.ok()) return holder.status();
    if (!holder->has_value() || !tried->insert((*holder)->ToString()).second) return Pulled();
    const std::string name = "landing-" + PieceId(k, p);
    std::error_code ec;
    std::filesystem::remove_all(parts_ / name, ec);  // no journal: the digests may have changed
    const auto start = std::chrono::steady_clock::now();
    // Stopped with the daemon, or once neither the live record nor the part is
    // in the registry (the fetch from upstream failed: what landed stays
    // served there, and would hold this pull until the swarm looked hopeless).
    auto stop = std::make_shared<std::atomic<bool>>(false);
    std::atomic<bool> abandoned{false};
    Mutex watch_mu;
    std::condition_variable watch_cv;
    bool pulled_done = false;
    std::thread watch([&] {
      MutexLock lock(watch_mu);
      int missing = 0;
      while (!pulled_done) {
        watch_cv.wait_for(lock, kLandingWatch);
        if (pulled_done) return;
        lock.Unlock();
        if (fleet_.install.cancel != nullptr && fleet_.install.cancel->load()) *stop = true;
        Result<std::optional<std::string>> live =
            fleet_.registry->Get(PieceKey("origin-live", k, p));
        bool gone = live.ok() && !live->has_value();
        if (gone) {
          Result<bool> part = fleet_.registry->Exists(PieceKey("origin-part", k, p));
          gone = part.ok() && !*part;
        }
        missing = gone ? missing + 1 : 0;
        if (missing >= 2) {
          abandoned = true;
          *stop = true;
        }
        lock.Lock();
      }
    });
    Result<std::filesystem::path> pulled = PullInto(
        name, file, manifest, {**holder}, [digests](uint32_t index) { return digests->Get(index); },
        stop);
    {
      MutexLock lock(watch_mu);
      pulled_done = true;
    }
    watch_cv.notify_all();
    watch.join();
    if (!pulled.ok()) {
      if (pulled.status().code() == StatusCode::kCancelled && !abandoned) return pulled.status();
      Logger().warn("Model {}: pulling piece {} of {} from {} while it lands upstream failed ({})",
                    name_, p, file.path, (*holder)->ToString(),
                    abandoned ? "its fetch from upstream ended without the piece"
                              : pulled.status().message());
      std::filesystem::remove_all(parts_ / name, ec);
      return Pulled();
    }
    // The part its fetcher publishes once the piece landed (at once, as a rule).
    const std::vector<std::string> verified = digests->Known();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      SEEDD_RETURN_IF_ERROR(Stopped(file));
      Result<std::optional<Part>> part = ReadPart(PieceKey("origin-part", k, p), file, piece);
      if (!part.ok()) return part.status();
      if (part->has_value()) {
        const Manifest& m = (*part)->manifest;
        bool same = m.chunks.size() == verified.size() && m.chunk_digest == manifest.chunk_digest;
        for (size_t i = 0; same && i < verified.size(); ++i)
          same = m.chunks[i].digest == verified[i];
        if (same) {
          Logger().info(
              "Model {}: pulled piece {} of {} ({}) from the fleet while it landed upstream in {}",
              name_, p, file.path, HumanBytes(piece.length), HumanSeconds(SecondsSince(start)));
          return Pulled(std::make_pair(*pulled, std::move(**part)));
        }
        Logger().warn(
            "Model {}: the part published for piece {} of {} lists other chunk digests than its "
            "fetcher published while it landed; pulling the part instead",
            name_, p, file.path);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(kPartPoll);
    }
    std::filesystem::remove_all(parts_ / name, ec);
    return Pulled();
  }

  // One of the fleet's kUpstreamStreams slots, then file `k`; each held (and
  // renewed) until released. nullopt when either is held by another, when the
  // file was published meanwhile (unless `orphaned`: its holders are gone), or
  // when this daemon fetches another part from upstream now: each upstream
  // stream has a daemon's downlink to itself, and the streams go to as many
  // daemons.
  Result<std::optional<Claim>> ClaimFile(size_t k, const OriginFile& file, bool orphaned) {
    return ClaimPart(
        Key("origin-lease", k), Key("origin-part", k), std::to_string(k),
        [&](const std::string& text) {
          return ParsePart(text, file, Piece{0, file.size}).ok();
        },
        orphaned);
  }

  // ClaimFile for any part: `lease` its claim, `part_key` its record (which
  // `published` accepts), `id` its name among this daemon's claims.
  Result<std::optional<Claim>> ClaimPart(const std::string& lease, const std::string& part_key,
                                         const std::string& id,
                                         const std::function<bool(const std::string&)>& published,
                                         bool orphaned) {
    {
      MutexLock lock(mu_);
      if (upstream_active_ > 0) return std::optional<Claim>();
      ++upstream_active_;
    }
    Result<std::optional<Claim>> claim = ClaimSlotAndPart(lease, part_key, id, published, orphaned);
    if (!claim.ok() || !claim->has_value()) UpstreamDone();
    return claim;
  }

  void UpstreamDone() {
    {
      MutexLock lock(mu_);
      --upstream_active_;
    }
    upstream_done_.notify_all();
  }

  Result<std::optional<Claim>> ClaimSlotAndPart(
      const std::string& lease, const std::string& part_key, const std::string& id,
      const std::function<bool(const std::string&)>& accept, bool orphaned) {
    const std::string who = holder_ + "/" + id;
    for (int s = 0; s < kUpstreamStreams; ++s) {
      const std::string slot = Key("origin-slot", static_cast<size_t>(s));
      Result<bool> got = fleet_.registry->Claim(slot, who, kLeaseTtl);
      if (!got.ok()) return got.status().WithContext("--registry");
      if (!*got) continue;
      Result<bool> leased = fleet_.registry->Claim(lease, who, kLeaseTtl);
      if (!leased.ok() || !*leased) {
        (void)fleet_.registry->Release(slot, who);
        if (!leased.ok()) return leased.status().WithContext("--registry");
        return std::optional<Claim>();
      }
      // Published between this daemon's look and its claim (the claim of the
      // daemon that published it ended): pulled, not fetched again.
      Result<std::optional<std::string>> published =
          orphaned ? std::optional<std::string>() : fleet_.registry->Get(part_key, kMaxPartRecord);
      if (!published.ok() || (published->has_value() && accept(**published))) {
        (void)fleet_.registry->Release(lease, who);
        (void)fleet_.registry->Release(slot, who);
        if (!published.ok()) return published.status().WithContext("--registry");
        return std::optional<Claim>();
      }
      Claim c;
      c.who = who;
      c.names = {slot, lease};
      for (const std::string& name : c.names) {
        c.renewers.push_back(std::make_shared<LeaseRenewer>(fleet_.registry, name, who));
      }
      return std::optional<Claim>(std::move(c));
    }
    return std::optional<Claim>();
  }

  void Release(Claim& claim) {
    claim.renewers.clear();
    for (const std::string& name : claim.names) (void)fleet_.registry->Release(name, claim.who);
    UpstreamDone();
  }

  Result<std::string> FetchUpstream(size_t k, const OriginFile& file, Claim claim,
                                    const std::function<Status(std::string_view)>& sink) {
    Logger().info("Model {}: fetching {} ({}) from upstream for the fleet", name_, file.path,
                  HumanBytes(file.size));
    Result<std::string> expected = upstream_->Fetch(file, [&](std::string_view piece) {
      from_upstream_ += piece.size();
      return sink(piece);
    });
    if (!expected.ok()) {
      Release(claim);  // another daemon may try at once
      return expected.status();
    }
    ++parts_upstream_;
    MutexLock lock(mu_);
    claimed_[k] = Claimed{std::move(claim), *expected};
    return expected;
  }

  const DaemonOptions& options_;
  const std::string name_;
  const OriginPtr upstream_;
  const OriginModel model_;
  const std::string hex_;
  const FleetContext fleet_;
  const std::filesystem::path parts_;
  const std::string holder_;
  // Parts are chunked as the whole model: their digests are the model's.
  const BuildOptions part_build_;
  const uint64_t piece_bytes_;
  std::map<std::string, size_t> index_;
  std::atomic<uint64_t> from_upstream_{0};
  std::atomic<uint64_t> from_fleet_{0};
  std::atomic<uint64_t> parts_upstream_{0};
  std::atomic<uint64_t> parts_fleet_{0};
  std::counting_semaphore<2> pulls_{2};
  Mutex mu_;
  std::map<size_t, Claimed> claimed_ GUARDED_BY(mu_);
  std::map<size_t, std::pair<Manifest, std::filesystem::path>> pulled_ GUARDED_BY(mu_);
  std::map<size_t, FileDigests> digests_ GUARDED_BY(mu_);
  // The pieces' manifests of each file fetched in pieces, by piece.
  std::map<size_t, std::vector<Manifest>> pieces_ GUARDED_BY(mu_);
  std::map<size_t, Claim> claiming_ GUARDED_BY(mu_);  // claimed by FetchLocal, for Fetch
  int upstream_active_ GUARDED_BY(mu_) = 0;           // files claimed here and not released
  Status failed_ GUARDED_BY(mu_);                     // the first file that did not land
  std::condition_variable upstream_done_;
};

}  // namespace

Result<OriginModelPlan> PlanOriginModel(const DaemonOptions& options, const std::string& name,
                                        const std::string& url,
                                        const std::shared_ptr<SwarmRegistry>& registry) {
  Result<OriginPtr> origin = OpenOrigin(url, options.origin_access);
  if (!origin.ok()) return origin.status();
  OriginModelPlan plan;
  const std::filesystem::path root = options.cache_dir / "weights" / "origins" / name;
  // Parts of a fetch with the fleet that ended with the daemon: served no more.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (e.path().filename().string().rfind(".parts-", 0) == 0) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
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
  // Fetched for the fleet already: pulled whole from the daemons holding it.
  const std::string hex = HexOfVersion(model->version);
  Result<std::optional<std::string>> published = registry->Get("origin-root:" + hex);
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
          "Model {}: {} ({}) was fetched from upstream by the fleet; pulling root digest {} from "
          "{} daemon(s) holding it",
          name, url, model->version, **published, plan.sources.size());
      return plan;
    }
  }
  plan.fleet = std::move(*model);
  return plan;
}

Result<std::filesystem::path> FetchWithFleet(const DaemonOptions& options, const std::string& name,
                                             const std::string& url, const OriginModel& model,
                                             const FleetContext& fleet) {
  Result<OriginPtr> upstream = OpenOrigin(url, options.origin_access);
  if (!upstream.ok()) return upstream.status();
  const std::filesystem::path root = options.cache_dir / "weights" / "origins" / name;
  const std::filesystem::path parts = root / (".parts-" + HexOfVersion(model.version));
  std::error_code ec;
  std::filesystem::create_directories(parts, ec);
  if (ec) return Status::IoError("create " + parts.string() + ": " + ec.message());
  auto origin =
      std::make_shared<FleetOrigin>(options, name, std::move(*upstream), model, fleet, parts);
  Logger().info(
      "Model {}: fetching {} ({}) with the fleet: each file from upstream once, "
      "served as soon as it is complete",
      name, url, model.version);
  if (fleet.relay.empty()) {
    Logger().warn(
        "Model {}: this daemon announces nothing (a wildcard --listen without --advertise): the "
        "fleet cannot pull the files it fetches, and fetches them from upstream again",
        name);
  }
  MaterializeOptions materialize;
  materialize.landed = [origin](size_t k, const std::filesystem::path& path,
                                const std::string& sha256) { origin->Landed(k, path, sha256); };
  materialize.failed = [origin](size_t k, const Status& why) { origin->Failed(k, why); };
  Result<std::filesystem::path> dir =
      FetchOriginModel(options, name, url, *origin, model, std::move(materialize),
                       [origin] { return origin->Said(); });
  if (dir.ok()) origin->RememberDigests(*dir);
  return dir;
}

void PublishOriginRoot(SwarmRegistry& registry, const std::string& name, const std::string& version,
                       const std::string& root) {
  Status st = registry.Put("origin-root:" + HexOfVersion(version), root, kRootTtl);
  if (!st.ok()) {
    Logger().warn("Model {}: could not publish root digest {} in the registry: {}", name, root,
                  st.message());
  }
}

}  // namespace seedd
