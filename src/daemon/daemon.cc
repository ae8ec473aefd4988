#include "seedd/daemon.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "common/crypto.h"
#include "common/logging.h"
#include "kinds/autotune/flashinfer_cache.h"
#include "kinds/weights/data_plane.h"
#include "seedd/artifact_kind.h"
#include "seedd/store_registry.h"
#include "wire/json_text.h"

namespace seedd {

std::filesystem::path DefaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::filesystem::path(xdg) / "seedd";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::filesystem::path(home) / ".cache" / "seedd";
  return ".seedd-cache";
}

Result<std::string> LoadToken(const std::optional<std::filesystem::path>& token_file) {
  constexpr size_t kMaxTokenBytes = 4096;
  std::string token;
  if (token_file.has_value()) {
    std::ifstream in(*token_file, std::ios::binary);
    if (!in) return Status::NotFound("cannot read the token file " + token_file->string());
    token.resize(kMaxTokenBytes + 1);
    in.read(token.data(), static_cast<std::streamsize>(token.size()));
    token.resize(static_cast<size_t>(in.gcount()));
    if (token.size() > kMaxTokenBytes) {
      return Status::InvalidArgument("the token file " + token_file->string() +
                                     " is larger than 4 KiB");
    }
  } else if (const char* env = std::getenv("SEEDD_TOKEN"); env != nullptr) {
    token = env;
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token_file.has_value() && token.empty()) {
    return Status::InvalidArgument("the token file " + token_file->string() + " is empty");
  }
  return token;
}

namespace {

// Fetches model `name` from the configured source into the cache directory,
// serving the chunks verified so far through `weights` meanwhile (a relay when
// `relay` is set), and points <name>/current at it; returns what to serve.
Result<ServedModel> PullAtStart(const DaemonOptions& options, const std::string& name,
                                const std::string& relay, WeightServer& weights) {
  if (!options.seed.source.has_value()) return Status::InvalidArgument("needs --source");
  std::vector<HostPort> sources = {*options.seed.source};
  sources.insert(sources.end(), options.more_sources.begin(), options.more_sources.end());
  const std::filesystem::path base = options.cache_dir / "weights" / name;
  Json request = {{"kind", kWeightShardsKind}, {"model", name}};
  if (!relay.empty()) request["relay"] = relay;
  // The manifest from the first source that has the model.
  std::optional<Json> response;
  for (const HostPort& source : sources) {
    SeedConfig client;
    client.source = source;
    client.token = options.seed.token;
    Result<std::unique_ptr<SeedTransport>> transport = SeedTransport::Create({}, client);
    if (!transport.ok()) return transport.status();
    response = (*transport)->Request(request);
    if (response.has_value() && (*response)["status"] == "ok") break;
  }
  if (!response.has_value() || (*response)["status"] != "ok") {
    // A restart without its sources still has the copy it pulled before.
    std::error_code ec;
    if (std::filesystem::is_directory(base / "current", ec)) {
      Logger().warn("Cannot pull model {} from {}; serving the local copy {}", name,
                    options.seed.source->ToString(), (base / "current").string());
      const std::filesystem::path dir = std::filesystem::canonical(base / "current", ec);
      BuildOptions build;
      build.digest_cache = options.cache_dir / "weights" / ".digests";
      build.chunk_size = options.weight_chunk_bytes;
      Result<Manifest> m = BuildManifest(name, dir, build);
      if (!m.ok()) return m.status();
      return ServedModel{std::move(*m), dir, nullptr};
    }
    if (!response.has_value()) return Status::Unavailable("no response from any source");
    return Status::NotFound("the source answered " + DumpJson(*response));
  }
  Result<Manifest> manifest = ParseManifest((*response)["payload"]);
  if (!manifest.ok()) return manifest.status();
  const std::filesystem::path dir = base / manifest->fingerprint;
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (!std::filesystem::exists(dir)) {
    FetchOptions fetch;
    fetch.token = options.seed.token;
    fetch.relay = relay;
    fetch.verified = std::make_shared<ChunkSet>(manifest->chunks.size());
    // Other fetchers may take what is verified already from here.
    Manifest served = *manifest;
    served.sources.clear();
    weights.Publish(ServedModel{served, StagingDir(dir), fetch.verified});
    FetchStats stats;
    const auto start = std::chrono::steady_clock::now();
    SEEDD_RETURN_IF_ERROR(FetchModel(*manifest, sources, dir, fetch, &stats));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Logger().info(
        "Pulled model {} ({} bytes) in {:.2f} s ({:.1f} MB/s; {} bytes from {} relays, {} "
        "resumed chunks)",
        name, manifest->total_size, secs, manifest->total_size / 1e6 / std::max(secs, 1e-9),
        stats.bytes_from_peers, stats.peers.size(), stats.chunks_resumed);
  }
  // Switch <name>/current atomically: a new link renamed over the old one.
  const std::filesystem::path tmp = base / (".current-" + RandomHex(4));
  std::filesystem::create_directory_symlink(manifest->fingerprint, tmp, ec);
  if (!ec) std::filesystem::rename(tmp, base / "current", ec);
  if (ec) return Status::IoError("switch " + (base / "current").string() + ": " + ec.message());
  manifest->sources.clear();
  return ServedModel{std::move(*manifest), dir, nullptr};
}

bool IsWildcard(const HostPort& hp) {
  return hp.host.empty() || hp.host == "0.0.0.0" || hp.host == "::" || hp.host == "[::]";
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options) {
  std::vector<std::shared_ptr<ArtifactStore>> shared;
  for (const std::string& url : options.store_urls) {
    Result<ArtifactStorePtr> store = OpenArtifactStore(url);
    if (!store.ok()) return store.status();
    Logger().info("Shared store {} is ready", RedactStoreUrl(url));
    // At run time a failing shared store is a warning and a miss, never a crash.
    shared.push_back(NewTolerantStore(std::move(*store)));
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
    Result<AutotuneRunnerPtr> made = NewAutotuneRunner(at.runner, std::move(shapes));
    if (!made.ok()) return made.status();
    runner = std::move(*made);
  }
  if (at.dp_rank < 0 || at.rank < 0) return Status::InvalidArgument("ranks must be non-negative");
  if (!at.config_hash.empty()) {
    bool hex = at.config_hash.size() >= 16 && at.config_hash.size() <= 128;
    for (char c : at.config_hash) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex)
      return Status::InvalidArgument("invalid config_hash (expected 16-128 lowercase hex digits)");
  }
  FlashInferOptions fi;
  fi.autotune_root = at.root.empty() ? options.cache_dir / "flashinfer_autotune" : at.root;
  fi.config_hash = at.config_hash;
  fi.dp_rank = at.dp_rank;
  fi.rank = at.rank;
  fi.enabled = at.enabled;
  auto autotune = std::make_shared<FlashInferWarmupCache>(fi, std::move(runner), shared);
  std::vector<SeedablePtr> seedables = {NewArtifactSeedable(options.cache_dir, std::move(shared)),
                                        autotune};
  std::shared_ptr<WeightServer> weights;
  if (!options.models.empty() || !options.pulls.empty()) {
    std::vector<ServedModel> served;
    BuildOptions build;
    build.digest_cache = options.cache_dir / "weights" / ".digests";
    build.chunk_size = options.weight_chunk_bytes;
    for (const auto& [name, dir] : options.models) {
      Result<Manifest> m = BuildManifest(name, dir, build);
      if (!m.ok()) return m.status().WithContext("--model " + name);
      Logger().info("Serving model {} from {}: {} files, {} bytes, root digest {}", name,
                    dir.string(), m->files.size(), m->total_size, m->root_digest);
      served.push_back({std::move(*m), dir, nullptr});
    }
    weights = std::make_shared<WeightServer>(std::move(served));
    seedables.push_back(NewWeightShardsSeedable(weights));
    options.transport.stream_handlers[std::string(kWeightDataKind)] =
        [weights](int fd, const Json& request) { weights->Serve(fd, request); };
  }
  Result<std::unique_ptr<SeedTransport>> transport =
      SeedTransport::Create(std::move(seedables), options.seed, options.transport);
  if (!transport.ok()) return transport.status();
  return std::unique_ptr<Daemon>(new Daemon(std::move(options), std::move(*transport),
                                            std::move(autotune), std::move(weights)));
}

Daemon::Daemon(DaemonOptions options, std::unique_ptr<SeedTransport> transport,
               std::shared_ptr<FlashInferWarmupCache> autotune,
               std::shared_ptr<WeightServer> weights)
    : options_(std::move(options)),
      transport_(std::move(transport)),
      autotune_(std::move(autotune)),
      weights_(std::move(weights)) {}

Daemon::~Daemon() { Stop(); }

Result<std::optional<HostPort>> Daemon::Start() {
  std::error_code ec;
  std::filesystem::create_directories(options_.cache_dir, ec);
  if (ec) {
    return Status::IoError("cannot create the cache directory " + options_.cache_dir.string() +
                           ": " + ec.message());
  }
  if (options_.autotune.warmup) {
    // Before the daemon reports ready: a replica is warm when seedd says so.
    Result<WarmupCache::Report> report = autotune_->Warmup(*transport_);
    if (!report.ok()) return report.status().WithContext("flashinfer_autotune warmup");
  }
  Result<std::optional<HostPort>> bound = transport_->StartListener();
  if (!bound.ok()) return bound.status();
  if (bound->has_value()) {
    Logger().info("Serving {} on {} from {}", kArtifactKind, (*bound)->ToString(),
                  options_.cache_dir.string());
  }
  if (!options_.pulls.empty()) {
    // Listening already: what is verified is relayed to other fetchers while the
    // pull runs. Peers reach this daemon at its advertised (or bound) address.
    std::string relay;
    if (options_.advertise.has_value()) {
      relay = options_.advertise->ToString();
    } else if (bound->has_value() && !IsWildcard(**bound)) {
      relay = (*bound)->ToString();
    } else if (bound->has_value()) {
      Logger().info(
          "Not relaying models while pulling: listening on a wildcard address "
          "without --advertise");
    }
    for (const std::string& name : options_.pulls) {
      Result<ServedModel> model = PullAtStart(options_, name, relay, *weights_);
      if (!model.ok()) return model.status().WithContext("--pull " + name);
      Logger().info("Serving model {} from {}: {} files, {} bytes, root digest {}", name,
                    model->dir.string(), model->manifest.files.size(), model->manifest.total_size,
                    model->manifest.root_digest);
      weights_->Publish(std::move(*model));
    }
  }
  return bound;
}

void Daemon::Stop() { transport_->Close(); }

}  // namespace seedd
