// Daemon: one seedd process's lifecycle: its seedables, its local store and its
// D2D transport.
//
// Thread safety: Start and Stop from one controlling thread; transport() is
// thread-safe once Start returned.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "seedd/compile_cache.h"
#include "seedd/fleet.h"
#include "seedd/origins.h"
#include "seedd/seed_config.h"
#include "seedd/seed_transport.h"
#include "seedd/seedable.h"
#include "seedd/status.h"
#include "seedd/tls.h"
#include "seedd/tokens.h"

namespace seedd {

// The flashinfer_autotune warmup cache (SPEC §5).
struct AutotuneOptions {
  bool warmup = false;              // run the warmup pass at start (--warmup flashinfer_autotune)
  bool enabled = true;              // the gate (--no-autotune turns it off)
  std::string runner = "cpu-gemm";  // or "command:<program and args>"
  std::string gemm_shapes;          // cpu-gemm shapes "MxNxK,..."; empty: the defaults
  std::filesystem::path root;       // empty: <cache-dir>/flashinfer_autotune
  std::string config_hash;          // empty: SHA-256 of the runner's configuration
  int64_t dp_rank = 0;
  int64_t rank = 0;
  bool pass_token = false;  // hand SEEDD_TOKEN on to a command: runner
};

struct DaemonOptions {
  SeedConfig seed;  // seed.source: the first --source; seed.token: the token sent
  // Tokens accepted besides seed.token (a token file's other lines).
  std::vector<std::string> accepted_tokens;
  // Further --source daemons: --pull fetches from every source at once.
  std::vector<HostPort> more_sources;
  std::filesystem::path cache_dir;
  // Shared stores (file://, redis://, s3:// URLs), consulted in this order after
  // the local disk store. One that cannot be built fails Create.
  std::vector<std::string> store_urls;
  AutotuneOptions autotune;
  // Compile caches (--warmup compile_cache:NAME=DIR): each seeded at Start when
  // its directory is empty (local disk, shared stores, then the source), then
  // published to the local disk store and the shared stores, and served from
  // its directory as it is at each request.
  std::vector<CompileCacheSpec> compile_caches;
  // After a warmup installs files (a compile cache, an autotune table, a
  // pulled model), they are watched: /status, the metrics and `seedctl status`
  // say how many another process opened, and a cache none of whose files was
  // opened after this long is reported once as a warning.
  std::chrono::milliseconds used_grace{std::chrono::minutes(10)};
  // Model directories served as weight_shards (name → directory).
  std::vector<std::pair<std::string, std::filesystem::path>> models;
  // Chunk size of their manifests; 0: chosen by each model's size (about 1,024
  // chunks, a power of two from 256 KiB to 64 MiB).
  uint64_t weight_chunk_bytes = 0;
  // How the chunks of served models are digested: "sha256" (holds against a
  // relay forging chunks) or "xxh3" (XXH3-128: catches corruption only, for
  // fleets whose relays are all trusted). Fetchers verify with whatever the
  // manifest names.
  std::string weight_chunk_digest = "sha256";
  // --pull also checks each file's SHA-256 before the model is committed.
  bool verify_pulled_files = false;
  // Models to fetch from the source at start, into
  // <cache-dir>/weights/<NAME>/<root digest> with <NAME>/current pointing at it;
  // then served like --model. Start pulls them with the listener up, relaying the
  // chunks verified so far to other fetchers. NAME@H pins the version: a
  // source offering another root digest is refused, and a local copy is served
  // only when it is H.
  std::vector<std::string> pulls;
  // How long --pull keeps retrying while no source has served the model (sources
  // down, or gone mid-pull): capped exponential backoff with jitter until then.
  std::chrono::seconds pull_timeout{1800};
  // After a --pull, the versions of its name kept (current included); older
  // ones, and staging left by abandoned pulls, are removed (housekeeping.h).
  int keep_versions = 2;
  // Peers a --pull fetches from at once (sources and relays); other relays it
  // learns of replace those that fail.
  size_t max_neighbours = 16;
  // Credentials and trust for models named by an origin URL (--model NAME=oci://...).
  OriginAccess origin_access;
  // Bytes per second this daemon sends of a model it is still pulling (0: no
  // limit); a little below the uplink keeps its own requests and TCP
  // acknowledgements from queueing behind its uploads (WeightServerOptions).
  uint64_t relay_upload_rate = 0;
  // Below that cap, how relay uploads are paced with no rate to know:
  // "capacity" (held a little below what the uplink was measured to deliver),
  // "delay" (by the queueing their round trips meet; on shaped test links it
  // slowed fleets down, docs/benchmarks.md) or "off".
  std::string relay_upload_pacing = "capacity";
  // A redis:// URL where this daemon announces the models it serves (and those it
  // is pulling) and where its pulls find more relays; empty: the sources'
  // own lists only.
  std::string registry_url;
  // With a registry: this daemon's zone (letters, digits, - _ .), published
  // with its status; preheat requests for a zone are taken by its daemons.
  std::string zone;
  // The address peers reach this daemon at, announced while pulling; default: the
  // bound listen address unless it is a wildcard (then no relaying).
  std::optional<HostPort> advertise;
  // Where to serve /metrics, /healthz, /readyz and /status over HTTP; none: off.
  // Started first in Start, so that /readyz answers 503 while warmups and pulls
  // at start run.
  std::optional<HostPort> admin_listen;
  // TLS 1.3 (seedd/tls.h): with tls.cert and tls.key the listener speaks TLS;
  // with tls.ca the daemon's own connections (adopts, pulls) do, verifying their
  // peers. Neither: plain TCP.
  TlsOptions tls;
  // Ed25519 keys (seedd/signing.h). With sign_key, the manifests of --model and
  // the compile cache bundles this daemon publishes are signed. With
  // trust_keys, a manifest or bundle is installed only when signed by one of
  // them (whatever its source: peers, shared stores, a local copy), and a
  // bundle is published only when this daemon can sign it.
  std::filesystem::path sign_key;
  std::vector<std::filesystem::path> trust_keys;
  // With TLS, a second listener in plain TCP for peers that cannot speak TLS.
  std::optional<HostPort> listen_plain;
  TransportOptions transport;
};

// $XDG_CACHE_HOME/seedd, else $HOME/.cache/seedd, else ./.seedd-cache.
std::filesystem::path DefaultCacheDir();

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Create(DaemonOptions options);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  // Runs the warmup caches (when asked), starts serving, then pulls the models
  // asked for; returns the bound listen address (nullopt without a listener).
  Result<std::optional<HostPort>> Start();
  // Stops serving; in-flight requests finish or hit their deadline. Idempotent.
  void Stop();
  // Asks a Start that is still warming up or pulling to stop: it returns
  // Cancelled soon after (a pull keeps its journal and resumes next time).
  // Callable from any thread (a signal-waiting one).
  void Cancel();

  // Replaces the tokens accepted and sent (the first), for requests and
  // connections from now on (a rotation); an empty list is refused.
  // Callable from any thread (a signal-waiting one).
  Status ReplaceTokens(std::vector<std::string> tokens);
  // Reads the TLS certificate, key and CA files again (renewed ones): new
  // connections use them, open ones keep theirs; on error the files in use
  // stay. OK without TLS. Callable from any thread.
  Status ReloadTls();

  SeedTransport& transport();
  const DaemonOptions& options() const;

  // True once Start has finished every warmup and pull at start.
  bool ready() const;
  // What /status shows: {"ready", "listen", "models": [...], "pulls": [...],
  // "warmups": [...], "usage": [...], "stores": [...]} (docs/operations.md). Thread-safe.
  Json StatusJson() const;
  // The admin endpoint's bound address, once Start has begun; nullopt without one.
  std::optional<HostPort> admin_address() const;

 private:
  // The kinds, the swarm, the endpoints and their state (daemon.cc).
  struct Rep;
  explicit Daemon(std::unique_ptr<Rep> rep);
  // Watches the files of model `name` as installed for the engine.
  void WatchModel(const std::string& name);
  // The fleet's registry: this host's status, and preheat requests.
  void StartFleetAgent(const std::string& relay);
  FleetHost DescribeHost() const;
  std::unique_ptr<Rep> rep_;
};

}  // namespace seedd
