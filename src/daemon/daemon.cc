#include "seedd/daemon.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "daemon/compile_cache_plane.h"
#include "daemon/daemon_rep.h"
#include "daemon/origin_models.h"
#include "daemon/pull_at_start.h"
#include "seedd/artifact_kind.h"
#include "seedd/catalog.h"
#include "seedd/logging.h"
#include "seedd/store_registry.h"
#include "seedd/units.h"
#include "seedd/weights.h"

namespace seedd {

std::filesystem::path DefaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::filesystem::path(xdg) / "seedd";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::filesystem::path(home) / ".cache" / "seedd";
  return ".seedd-cache";
}

namespace {

// What `seedctl ls` shows: the models served, and the artifact keys that a peer
// could adopt (the local cache's, then the shared stores') under `prefix`.
Result<Catalog> ListCatalog(const std::filesystem::path& cache_dir,
                            const std::vector<std::shared_ptr<ArtifactStore>>& shared,
                            const WeightServer* weights, const std::string& prefix) {
  Catalog catalog;
  if (weights != nullptr) {
    for (const auto& m : weights->Models()) {
      catalog.models.push_back({m->manifest.model, m->manifest.root_digest, m->manifest.total_size,
                                m->manifest.files.size(), m->available == nullptr});
    }
  }
  std::set<std::string> seen;
  auto add = [&](const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      if (key.rfind("weights/", 0) == 0 || seen.count(key) != 0) continue;
      if (seen.size() == kMaxCatalogKeys) {
        catalog.truncated = true;
        return;
      }
      seen.insert(key);
      catalog.artifacts.push_back(key);
    }
  };
  Result<std::vector<std::string>> local = NewDiskArtifactStore("", cache_dir)->List(prefix);
  if (!local.ok()) return local.status().WithContext("list " + cache_dir.string());
  add(*local);
  for (const auto& store : shared) {
    Result<std::vector<std::string>> keys = store->List(prefix);
    if (keys.ok()) add(*keys);  // a store that is down lists nothing (the tolerant wrapper logs)
  }
  return catalog;
}

bool IsWildcard(const HostPort& hp) {
  return hp.host.empty() || hp.host == "0.0.0.0" || hp.host == "::";
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options) {
  std::vector<std::string> accepted = {options.seed.token};
  accepted.insert(accepted.end(), options.accepted_tokens.begin(), options.accepted_tokens.end());
  auto tokens = std::make_shared<TokenRing>(std::move(accepted));
  options.transport.tokens = tokens;
  const bool outgoing = options.seed.source.has_value() || !options.more_sources.empty() ||
                        !options.pulls.empty() || !options.registry_url.empty();
  if (!options.tls.cert.empty() && options.tls.ca.empty() && outgoing) {
    // Its own requests would go in plaintext, the token with them, while its
    // listener speaks TLS: never silently.
    return Status::InvalidArgument(
        "--tls-cert without --tls-ca: this daemon's own connections (--source, --pull, "
        "--registry, relays) would be plaintext and carry the token; give --tls-ca (the CA "
        "that signed its peers' certificates)");
  }
  if (!options.tls.cert.empty() || !options.tls.key.empty() || !options.tls.ca.empty()) {
    Result<std::shared_ptr<TlsContext>> tls = TlsContext::Create(options.tls);
    if (!tls.ok()) return tls.status();
    options.transport.tls = std::move(*tls);
  } else if (options.listen_plain.has_value()) {
    return Status::InvalidArgument("--listen-plain is for a daemon whose --listen speaks TLS");
  }
  std::shared_ptr<const SigningKey> sign_key;
  if (!options.sign_key.empty()) {
    Result<std::shared_ptr<const SigningKey>> key = SigningKey::Load(options.sign_key);
    if (!key.ok()) return key.status().WithContext("--sign-key");
    sign_key = std::move(*key);
    Logger().info("Signing what this daemon publishes with key {}", sign_key->fingerprint());
  }
  std::shared_ptr<const TrustedKeys> trust;
  if (!options.trust_keys.empty()) {
    Result<std::shared_ptr<const TrustedKeys>> keys = TrustedKeys::Load(options.trust_keys);
    if (!keys.ok()) return keys.status().WithContext("--trust-key");
    trust = std::move(*keys);
    Logger().info("Installing only manifests and bundles signed by {}", trust->Describe());
  }
  for (CompileCacheSpec& spec : options.compile_caches) {
    spec.sign_key = sign_key;
    spec.trust = trust;
  }
  std::vector<std::shared_ptr<ArtifactStore>> shared;
  for (const std::string& url : options.store_urls) {
    Result<ArtifactStorePtr> store = OpenArtifactStore(url);
    if (!store.ok()) return store.status();
    Logger().info("Shared store {} is ready", RedactStoreUrl(url));
    // At run time a failing shared store is a warning and a miss, never a crash.
    shared.push_back(NewTolerantStore(std::move(*store)));
  }
  std::shared_ptr<SwarmRegistry> registry;
  if (!options.registry_url.empty()) {
    Result<std::shared_ptr<SwarmRegistry>> opened = SwarmRegistry::Open(options.registry_url);
    if (!opened.ok()) {
      return opened.status().WithContext("--registry " + RedactStoreUrl(options.registry_url));
    }
    registry = std::move(*opened);
    Logger().info("Registry {} is ready", registry->Describe());
  }
  AutotuneOptions& at = options.autotune;
  AutotuneRunnerPtr runner;
  if (at.warmup) {
    std::vector<GemmShape> shapes = DefaultGemmShapes();
    if (!at.gemm_shapes.empty()) {
      Result<std::vector<GemmShape>> parsed = ParseGemmShapes(at.gemm_shapes);
      if (!parsed.ok()) return parsed.status();
      shapes = std::move(*parsed);
    }
    Result<AutotuneRunnerPtr> made = NewAutotuneRunner(at.runner, std::move(shapes), at.pass_token);
    if (!made.ok()) return made.status();
    runner = std::move(*made);
  }
  if (at.dp_rank < 0 || at.rank < 0) return Status::InvalidArgument("ranks must be non-negative");
  if (!at.config_hash.empty()) {
    if (!IsLowerHex(at.config_hash, 16, 128)) {
      return Status::InvalidArgument("invalid config_hash (expected 16-128 lowercase hex digits)");
    }
  }
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  options.transport.cancel = cancel;  // the daemon's own requests end at a stop
  FlashInferOptions fi;
  fi.cancel = cancel;
  fi.autotune_root = at.root.empty() ? options.cache_dir / "flashinfer_autotune" : at.root;
  fi.config_hash = at.config_hash;
  fi.dp_rank = at.dp_rank;
  fi.rank = at.rank;
  fi.enabled = at.enabled;
  auto autotune = std::make_shared<FlashInferWarmupCache>(fi, std::move(runner), shared);
  std::set<std::string> cache_names;
  for (const CompileCacheSpec& spec : options.compile_caches) {
    SEEDD_RETURN_IF_ERROR(ValidateCompileCacheKey(Json{{"namespace", spec.name}, {"key", spec.key}})
                              .WithContext("compile cache " + spec.name));
    if (spec.dir.empty()) {
      return Status::InvalidArgument("compile cache " + spec.name + ": no directory");
    }
    if (!cache_names.insert(spec.name).second) {
      return Status::InvalidArgument("compile cache " + spec.name + " is given twice");
    }
  }
  std::vector<SeedablePtr> seedables = {NewArtifactSeedable(options.cache_dir, shared), autotune};
  for (const std::string& pull : options.pulls) {
    const auto [name, pin] = SplitPin(pull);
    if (pull.find('@') != std::string::npos) {
      SEEDD_RETURN_IF_ERROR(ValidatePin(pin, "--pull " + pull));
    }
  }
  std::shared_ptr<WeightServer> weights;
  SeedablePtr weight_shards;
  WeightInstallOptions weight_install;
  auto board = std::make_shared<PullBoard>();
  std::shared_ptr<DaemonCompileCachePlane> compile_plane;
  // Origin models another daemon of the fleet fetched: pulled at start (NAME@ROOT
  // and the daemons holding it).
  std::vector<std::pair<std::string, std::vector<HostPort>>> origin_pulls;
  // Origin models nobody fetched yet: fetched at start together with the fleet.
  std::vector<Daemon::Rep::FleetFetch> fleet_fetches;
  BuildOptions weight_build;
  // Compile caches too large to travel inline travel on the weights data plane.
  // What warmups and pulls install is watched (usage_watch.h).
  std::shared_ptr<UsageWatch> usage;
  if (options.autotune.warmup || !options.compile_caches.empty() || !options.pulls.empty() ||
      !options.models.empty() || !options.registry_url.empty()) {
    usage = UsageWatch::Start(options.used_grace);
  }
  // With a registry the daemon may be asked to pull (a preheat request) at any time.
  if (!options.models.empty() || !options.pulls.empty() || !options.compile_caches.empty() ||
      !options.registry_url.empty()) {
    std::vector<ServedModel> served;
    BuildOptions build;
    build.digest_cache = options.cache_dir / "weights" / ".digests";
    build.chunk_size = options.weight_chunk_bytes;
    Result<ChunkDigest> algo = ParseChunkDigest(options.weight_chunk_digest, "--chunk-digest");
    if (!algo.ok()) return algo.status();
    build.chunk_digest = *algo;
    build.sign_key = sign_key;
    weight_build = build;
    for (const auto& [name, spec] : options.models) {
      Result<std::filesystem::path> dir = Status::Internal("unset");
      if (IsOriginUrl(spec.string())) {
        Result<OriginModelPlan> plan = PlanOriginModel(options, name, spec.string(), registry);
        if (!plan.ok()) return plan.status().WithContext("--model " + name);
        if (plan->fleet.has_value()) {  // fetched at start with the fleet
          fleet_fetches.push_back({name, spec.string(), std::move(*plan->fleet)});
          continue;
        }
        if (!plan->dir.has_value()) {  // pulled at start from the fleet
          origin_pulls.push_back({plan->pull, plan->sources});
          continue;
        }
        dir = *plan->dir;
      } else {
        dir = ResolveModelDir(spec.string());
      }
      if (!dir.ok()) return dir.status().WithContext("--model " + name);
      Result<IndexedModel> m = IndexModel(name, *dir, build);
      if (!m.ok()) return m.status().WithContext("--model " + name);
      Logger().info("Serving model {} from {}: {} files, {} bytes, root digest {}", name,
                    dir->string(), m->manifest.files.size(), m->manifest.total_size,
                    m->manifest.root_digest);
      served.push_back(ServeIndexed(std::move(*m)));
    }
    WeightServerOptions serving;
    serving.zone = options.zone;
    serving.relay_upload_rate = options.relay_upload_rate;
    const std::optional<RelayPacingMode> pacing = ParseRelayPacingMode(options.relay_upload_pacing);
    if (!pacing.has_value()) {
      return Status::InvalidArgument("relay upload pacing '" + options.relay_upload_pacing +
                                     "' is none of capacity, delay, off");
    }
    serving.relay_pacing = *pacing;
    // An engine that copies a pulled model from this daemon (seedctl pull, seedd.pull)
    // uses its files as much as one that opens them in place.
    // The version directory `current` names, canonical as WatchModel's paths,
    // resolved again only when the link changes: this runs for every file a
    // client is sent (thousands a second for a model of small files), and a
    // canonical path is a readlink of every component.
    struct Versions {
      Mutex mu;
      std::map<std::string, std::pair<std::filesystem::path, std::filesystem::path>> dirs
          GUARDED_BY(mu);  // model -> (the link's target, its canonical directory)
    };
    serving.served_to_client = [usage, cache_dir = options.cache_dir,
                                versions = std::make_shared<Versions>()](const std::string& model,
                                                                         const std::string& file) {
      // Models served from a directory of their own are not watched: no
      // readlink per file sent.
      if (usage == nullptr || !usage->Watches(model)) return;
      std::error_code ec;
      const std::filesystem::path current = cache_dir / "weights" / model / "current";
      const std::filesystem::path target = std::filesystem::read_symlink(current, ec);
      if (ec) return;
      std::filesystem::path dir;
      {
        MutexLock lock(versions->mu);
        auto it = versions->dirs.find(model);
        if (it != versions->dirs.end() && it->second.first == target) dir = it->second.second;
      }
      if (dir.empty()) {
        dir = std::filesystem::canonical(current, ec);
        if (ec) return;
        MutexLock lock(versions->mu);
        versions->dirs[model] = {target, dir};
      }
      usage->MarkUsed(model, dir / file);
    };
    weights = std::make_shared<WeightServer>(std::move(served), serving);
    compile_plane = std::make_shared<DaemonCompileCachePlane>(options.cache_dir, build, weights);
    WeightInstallOptions install;
    install.cache_dir = options.cache_dir;
    install.token = options.seed.token;
    install.tokens = tokens;
    install.cancel = cancel;
    install.max_neighbours = options.max_neighbours;
    install.registry = registry;
    install.zone = options.zone;
    install.verify_sha256 = options.verify_pulled_files;
    install.board = board;
    install.trust = trust;
    if (options.transport.tls != nullptr && !options.tls.ca.empty()) {
      install.tls = options.transport.tls;
    }
    if (options.seed.source.has_value()) install.sources.push_back(*options.seed.source);
    install.sources.insert(install.sources.end(), options.more_sources.begin(),
                           options.more_sources.end());
    weight_install = install;
    weight_shards = NewWeightShardsSeedable(weights, std::move(install));
    seedables.push_back(weight_shards);
    options.transport.stream_handlers[std::string(kWeightDataKind)] =
        [weights](Conn& conn, const Json& request) { weights->Serve(conn, request); };
  }
  seedables.push_back(NewCompileCacheSeedable(options.cache_dir, options.compile_caches, shared,
                                              trust, compile_plane));
  seedables.push_back(NewCatalogSeedable(
      [cache_dir = options.cache_dir, shared, weights](const std::string& prefix) {
        return ListCatalog(cache_dir, shared, weights.get(), prefix);
      }));
  Result<std::unique_ptr<SeedTransport>> transport =
      SeedTransport::Create(std::move(seedables), options.seed, options.transport);
  if (!transport.ok()) return transport.status();
  auto rep = std::make_unique<Rep>();
  rep->options_ = std::move(options);
  rep->transport_ = std::move(*transport);
  rep->autotune_ = std::move(autotune);
  rep->shared_ = shared;
  rep->weights_ = std::move(weights);
  rep->usage_ = std::move(usage);
  rep->weight_shards_ = std::move(weight_shards);
  rep->weight_install_ = std::move(weight_install);
  rep->compile_plane_ = std::move(compile_plane);
  rep->cancel_ = std::move(cancel);
  rep->origin_pulls_ = std::move(origin_pulls);
  rep->fleet_fetches_ = std::move(fleet_fetches);
  rep->weight_build_ = std::move(weight_build);
  rep->registry_ = std::move(registry);
  rep->tokens_ = std::move(tokens);
  rep->trust_ = std::move(trust);
  auto daemon = std::unique_ptr<Daemon>(new Daemon(std::move(rep)));
  daemon->rep_->pulls_ = std::move(board);
  return daemon;
}

Daemon::Daemon(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

SeedTransport& Daemon::transport() { return *rep_->transport_; }
const DaemonOptions& Daemon::options() const { return rep_->options_; }
bool Daemon::ready() const { return rep_->ready_.load(); }

void Daemon::Cancel() { rep_->cancel_->store(true, std::memory_order_relaxed); }

Status Daemon::ReloadTls() {
  if (rep_->options_.transport.tls == nullptr) return Status::Ok();
  return rep_->options_.transport.tls->Reload();
}

Status Daemon::ReplaceTokens(std::vector<std::string> tokens) {
  tokens.erase(std::remove(tokens.begin(), tokens.end(), std::string()), tokens.end());
  if (tokens.empty()) return Status::InvalidArgument("no token: keeping the current ones");
  rep_->tokens_->Replace(std::move(tokens));
  return Status::Ok();
}

Daemon::~Daemon() { Stop(); }

namespace {

// Creates, writes, syncs and removes a small file in `dir`.
Status CheckWritable(const std::filesystem::path& dir) {
  const std::filesystem::path probe = dir / (".seedd-write-check." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(std::strerror(errno));
  const bool written = ::write(fd, "x", 1) == 1 && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return written ? Status::Ok() : Status::IoError(std::strerror(saved));
}

// The autotune report's source as a metric label.
std::string SourceLabel(const std::string& source) {
  if (source.rfind("peer", 0) == 0) return "peer";
  if (source.rfind("shared store", 0) == 0) return "store";
  if (source.rfind("local", 0) == 0) return "local";
  return "computed";
}

}  // namespace

FleetHost Daemon::DescribeHost() const {
  FleetHost me;
  me.ready = ready();
  for (const auto& m : rep_->weights_->Models()) {
    const uint64_t chunks = m->manifest.chunks.size();
    me.models.push_back({m->manifest.model, m->manifest.root_digest, m->available == nullptr,
                         m->manifest.total_size, chunks,
                         m->available == nullptr ? chunks : m->available->Count()});
  }
  MutexLock lock(rep_->preheat_mu_);
  for (const PullBoard::Entry& p : rep_->pulls_->Snapshot()) {
    auto preheat = rep_->preheat_of_.find(p.model);
    me.pulls.push_back({p.model, p.root_digest, p.state, p.total_bytes, p.verified_bytes,
                        preheat == rep_->preheat_of_.end() ? "" : preheat->second});
  }
  return me;
}

// Publishes this host's status to the registry and takes preheat requests.
void Daemon::StartFleetAgent(const std::string& relay) {
  FleetAgent::Options fo;
  fo.addr = relay;
  fo.zone = rep_->options_.zone;
  auto holds = [this](const std::string& model, const std::string& root) {
    for (const auto& m : rep_->weights_->Models()) {
      if (m->manifest.model == model && m->available == nullptr &&
          (root.empty() || root == m->manifest.root_digest)) {
        return true;
      }
    }
    return false;
  };
  auto pull = [this, relay](const std::string& what, const std::string& id) {
    MutexLock lock(rep_->preheat_mu_);
    rep_->preheat_of_[SplitPin(what).first] = id;
    rep_->preheats_.emplace_back([this, relay, what, id] {
      Status pulled =
          PullAtStart(rep_->options_, what, relay, rep_->weights_, rep_->weight_install_);
      metrics::PreheatPull(pulled.ok() ? "done" : "failed");
      if (pulled.ok()) {
        Logger().info("Preheat {}: model {} pulled and served", id, what);
        WatchModel(SplitPin(what).first);
      } else {
        Logger().warn("Preheat {}: model {}: {}", id, what, pulled.message());
      }
    });
  };
  rep_->fleet_ = std::make_unique<FleetAgent>(
      rep_->registry_, fo, [this] { return DescribeHost(); }, holds, pull);
}

// The files of model `name` as the daemon installed it (<cache>/weights/NAME/current).
void Daemon::WatchModel(const std::string& name) {
  if (rep_->usage_ == nullptr) return;
  const std::filesystem::path current = rep_->options_.cache_dir / "weights" / name / "current";
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::canonical(current, ec);
  if (ec) return;
  std::vector<std::filesystem::path> files;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) files.push_back(it->path());
  }
  rep_->usage_->Watch(name, files,
                      "check that the engine loads the model from " + current.string());
}

Result<std::optional<HostPort>> Daemon::Start() {
  if (rep_->options_.admin_listen.has_value() && rep_->admin_ == nullptr) {
    Result<std::unique_ptr<AdminServer>> admin =
        AdminServer::Start(*rep_->options_.admin_listen,
                           {[this] { return ready(); }, [this] { return StatusJson(); }});
    if (!admin.ok()) return admin.status();
    rep_->admin_ = std::move(*admin);
  }
  std::error_code ec;
  std::filesystem::create_directories(rep_->options_.cache_dir, ec);
  if (ec) {
    return Status::IoError("cannot create the cache directory " +
                           rep_->options_.cache_dir.string() + ": " + ec.message());
  }
  // Checked by writing: a directory that exists but cannot be written (read
  // only, another owner) would fail every pull later, as if the peers had.
  if (Status writable = CheckWritable(rep_->options_.cache_dir); !writable.ok()) {
    return Status::IoError("the cache directory " + rep_->options_.cache_dir.string() +
                           " cannot be written (" + writable.message() +
                           "): seedd keeps pulled models and verified chunks there; give it a "
                           "writable --cache-dir");
  }
  if (rep_->options_.autotune.warmup) {
    // Before the daemon reports ready: a replica is warm when seedd says so.
    rep_->RecordWarmup({"flashinfer_autotune", "running", "", "", 0});
    const auto began = std::chrono::steady_clock::now();
    Result<WarmupCache::Report> report = rep_->autotune_->Warmup(*rep_->transport_);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (!report.ok()) {
      metrics::Warmup("flashinfer_autotune", "failed", took);
      rep_->RecordWarmup({"flashinfer_autotune", "failed", "", report.status().message(), took});
      return report.status().WithContext("flashinfer_autotune warmup");
    }
    metrics::Warmup("flashinfer_autotune", SourceLabel(report->source), report->seconds);
    rep_->RecordWarmup({"flashinfer_autotune", "done", report->source, "", report->seconds});
    if (report->source != "disabled") {
      const AutotuneOptions& at = rep_->options_.autotune;
      const std::filesystem::path root =
          at.root.empty() ? rep_->options_.cache_dir / "flashinfer_autotune" : at.root;
      const std::filesystem::path table =
          root / rep_->autotune_->config_hash() / FlashInferFilename(at.dp_rank, at.rank);
      rep_->usage_->Watch("flashinfer_autotune", {table},
                          "check that the engine loads its autotune table from " + table.string() +
                              " (FlashInfer's autotuner, for this config hash and rank)");
    }
  }
  Result<std::optional<HostPort>> bound = rep_->transport_->StartListener();
  if (!bound.ok()) return bound.status();
  rep_->bound_ = *bound;
  if (rep_->options_.listen_plain.has_value()) {
    Result<HostPort> plain = rep_->transport_->StartPlainListener(*rep_->options_.listen_plain);
    if (!plain.ok()) return plain.status().WithContext("--listen-plain");
    Logger().info("Serving plain TCP on {} too, for peers without TLS", plain->ToString());
  }
  if (bound->has_value()) {
    Logger().info("Serving {} on {} from {}", kArtifactKind, (*bound)->ToString(),
                  rep_->options_.cache_dir.string());
  }
  // Peers reach this daemon's data plane at its advertised (or bound) address:
  // announced while pulling (a relay) and in the registry.
  std::string relay;
  if (rep_->options_.advertise.has_value()) {
    relay = rep_->options_.advertise->ToString();
  } else if (bound->has_value() && !IsWildcard(**bound)) {
    relay = (*bound)->ToString();
  } else if (bound->has_value() && (!rep_->options_.pulls.empty() || rep_->registry_ != nullptr)) {
    Logger().info(
        "Not relaying models nor announcing them: listening on a wildcard address without "
        "--advertise");
  }
  if (rep_->registry_ != nullptr && rep_->weights_ != nullptr && !relay.empty()) {
    rep_->announcer_ = std::make_unique<RegistryAnnouncer>(rep_->registry_, rep_->weights_, relay);
    StartFleetAgent(relay);
  }
  if (rep_->compile_plane_ != nullptr) {
    rep_->compile_plane_->SetPuller(
        [this, relay](const std::string& model, const std::string& root_digest) {
          if (!rep_->options_.seed.source.has_value()) {
            return Status::FailedPrecondition("no --source to pull " + model + " from");
          }
          return PullAtStart(rep_->options_, model + "@" + root_digest, relay, rep_->weights_,
                             rep_->weight_install_);
        });
  }
  // Listening already: a large cache's files are relayed while they are pulled.
  for (const CompileCacheSpec& spec : rep_->options_.compile_caches) {
    const std::string kind = "compile_cache:" + spec.name;
    rep_->RecordWarmup({kind, "running", "", "", 0});
    const auto began = std::chrono::steady_clock::now();
    Result<CompileCacheWarmupReport> report = WarmCompileCache(
        spec, rep_->options_.cache_dir, rep_->shared_, *rep_->transport_, rep_->compile_plane_);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (!report.ok()) {
      metrics::Warmup("compile_cache", "failed", took);
      rep_->RecordWarmup({kind, "failed", "", report.status().message(), took});
      return report.status().WithContext(kind + " warmup");
    }
    LogFields fields{{"warmup", kind},
                     {"source", report->source},
                     {"files_installed", report->install.installed},
                     {"bytes_installed", report->install.bytes},
                     {"seconds", took}};
    Logger().info("{}: {} ({} files installed, {} kept as newer, {}published{}) in {:.3f} s", kind,
                  report->source, report->install.installed, report->install.kept_newer,
                  report->published ? "" : "not ",
                  report->by_reference ? "; its files on the data plane" : "", took);
    metrics::Warmup("compile_cache", SourceLabel(report->source), took);
    rep_->RecordWarmup({kind, "done", report->source, "", took});
    if (!report->install.paths.empty()) {
      std::vector<std::filesystem::path> files;
      for (const std::string& rel : report->install.paths) files.push_back(spec.dir / rel);
      std::string factors;
      for (const auto& [k, v] : spec.factors)
        factors += (factors.empty() ? "" : ", ") + k + "=" + v;
      rep_->usage_->Watch(kind, files,
                          "check that the engine reads " + spec.dir.string() +
                              " and that its key factors are these (" + factors + ")");
    }
  }
  // Origin models fetched with the fleet: each file served as soon as it is here.
  for (const Rep::FleetFetch& f : rep_->fleet_fetches_) {
    const std::string kind = "weight_shards " + f.name;
    rep_->RecordWarmup({kind, "running", "", "", 0});
    const auto began = std::chrono::steady_clock::now();
    FleetContext fleet{rep_->registry_, rep_->weights_, rep_->weight_install_, rep_->weight_build_,
                       relay};
    Result<std::filesystem::path> dir =
        FetchWithFleet(rep_->options_, f.name, f.url, f.model, fleet);
    Result<IndexedModel> m = dir.ok() ? IndexModel(f.name, *dir, rep_->weight_build_)
                                      : Result<IndexedModel>(dir.status());
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (!m.ok()) {
      metrics::Warmup("weight_shards", "failed", took);
      rep_->RecordWarmup({kind, "failed", "", m.status().message(), took});
      return m.status().WithContext("--model " + f.name);
    }
    Logger().info("Serving model {} from {}: {} files, {} bytes, root digest {}", f.name,
                  dir->string(), m->manifest.files.size(), m->manifest.total_size,
                  m->manifest.root_digest);
    const std::string root = m->manifest.root_digest;
    rep_->weights_->Publish(ServeIndexed(std::move(*m)));
    PublishOriginRoot(*rep_->registry_, f.name, f.model.version, root);
    metrics::Warmup("weight_shards", "peer", took);
    rep_->RecordWarmup({kind, "done", "upstream and fleet", "", took});
    WatchModel(f.name);
  }
  // The --pull list, then origin models another daemon fetched for the fleet
  // (from the daemons holding them rather than --source).
  std::vector<std::pair<std::string, std::vector<HostPort>>> all_pulls;
  for (const std::string& pull : rep_->options_.pulls) all_pulls.push_back({pull, {}});
  all_pulls.insert(all_pulls.end(), rep_->origin_pulls_.begin(), rep_->origin_pulls_.end());
  if (!all_pulls.empty()) {
    // Listening already: what is verified is relayed to other fetchers while the
    // pull runs.
    for (const auto& [pull, holders] : all_pulls) {
      DaemonOptions pull_options = rep_->options_;
      WeightInstallOptions install = rep_->weight_install_;
      if (!holders.empty()) {
        pull_options.seed.source = holders.front();
        pull_options.more_sources.assign(holders.begin() + 1, holders.end());
        install.sources = holders;
      }
      const std::string name = SplitPin(pull).first;
      if (rep_->cancel_->load()) return Status::Cancelled("stopped before pulling model " + name);
      const std::string kind = "weight_shards " + name;
      rep_->RecordWarmup({kind, "running", "", "", 0});
      const auto began = std::chrono::steady_clock::now();
      Status pulled = PullAtStart(pull_options, pull, relay, rep_->weights_, install);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (!pulled.ok()) {
        metrics::Warmup("weight_shards", "failed", took);
        rep_->RecordWarmup({kind, "failed", "", pulled.message(), took});
        return pulled.WithContext((holders.empty() ? "--pull " : "--model ") + pull);
      }
      // Fetched when its pull is on the board as done; else a local copy was served.
      bool fetched = false;
      for (const PullBoard::Entry& p : rep_->pulls_->Snapshot()) {
        fetched = fetched || (p.model == name && p.state == "done");
      }
      metrics::Warmup("weight_shards", fetched ? "peer" : "local", took);
      rep_->RecordWarmup({kind, "done", fetched ? "peers" : "local copy", "", took});
      WatchModel(name);
      GcOptions gc;
      gc.keep_versions = rep_->options_.keep_versions;
      gc.only_model = name;
      Result<GcReport> collected = CollectWeightsGarbage(rep_->options_.cache_dir, gc);
      if (collected.ok() && !collected->removed.empty()) {
        Logger().info(
            "Model {}: removed {} old version(s) and abandoned pull(s), {:.1f} MiB "
            "(--keep-versions {})",
            name, collected->removed.size(), collected->bytes / 1048576.0,
            rep_->options_.keep_versions);
      }
    }
  }
  rep_->ready_ = true;
  return bound;
}

void Daemon::Stop() {
  rep_->ready_ = false;
  rep_->admin_.reset();
  rep_->fleet_.reset();
  {
    // Preheat pulls stop (their journals kept) before what they publish to goes.
    std::vector<std::thread> preheats;
    {
      MutexLock lock(rep_->preheat_mu_);
      preheats.swap(rep_->preheats_);
    }
    if (!preheats.empty()) rep_->cancel_->store(true);
    for (std::thread& t : preheats) t.join();
  }
  rep_->announcer_.reset();
  rep_->transport_->Close();
  if (rep_->weights_ != nullptr && !rep_->stopped_) {
    Logger().info("Weight data plane: served {} bytes of chunks", rep_->weights_->bytes_served());
  }
  rep_->stopped_ = true;
}

}  // namespace seedd
