// seedd: the seeding daemon. Parses flags and runs a seedd::Daemon until SIGINT/SIGTERM;
// SIGHUP re-reads the token file.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "cli_chunk.h"
#include "cli_suggest.h"
#include "config_file.h"
#include "notify.h"
#include "seedd/daemon.h"
#include "seedd/fleet.h"
#include "seedd/logging.h"
#include "seedd/signing.h"
#include "seedd/store_registry.h"
#include "seedd/tls.h"
#include "seedd/weights.h"
#include "seedd_version.h"

namespace {

// Flags set by --config FILE → "FILE:LINE: key 'K'", so an error about such a
// flag's value says where that value came from.
std::map<std::string, std::string> g_from_config;

// --warmup compile_cache:NAME=DIR.
constexpr std::string_view kCompileWarmup = "compile_cache:";

// "~/x" as the shell would expand it (a configuration file's paths are not).
std::string ExpandHome(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (path.rfind("~/", 0) == 0 && home != nullptr && *home != '\0') return home + path.substr(1);
  return path;
}

int Fail(const std::string& message) {
  std::string where;
  if (message.rfind("--", 0) == 0) {
    const std::string flag = message.substr(0, message.find_first_of(": "));
    if (auto it = g_from_config.find(flag); it != g_from_config.end()) where = it->second + ": ";
  }
  std::fprintf(stderr, "seedd: %s%s\n", where.c_str(), message.c_str());
  return 2;
}

// What --check-config opens without side effects: the TLS files parse and the
// key matches the certificate, the signing and trusted keys load, every model
// directory exists and can be read, the cache directory can be written (or
// created), store and registry URLs parse, the factors file reads. Each
// problem is one line naming the flag.
std::vector<std::string> CheckFiles(const seedd::DaemonOptions& o,
                                    const std::vector<std::string>& factors,
                                    const std::string& factors_file) {
  std::vector<std::string> problems;
  if (!o.tls.cert.empty() || !o.tls.key.empty() || !o.tls.ca.empty()) {
    seedd::Result<std::shared_ptr<seedd::TlsContext>> tls = seedd::TlsContext::Create(o.tls);
    if (!tls.ok())
      problems.push_back("TLS (--tls-cert/--tls-key/--tls-ca): " + tls.status().message());
  }
  if (!o.sign_key.empty()) {
    auto key = seedd::SigningKey::Load(o.sign_key);
    if (!key.ok()) problems.push_back("--sign-key: " + key.status().message());
  }
  if (!o.trust_keys.empty()) {
    auto keys = seedd::TrustedKeys::Load(o.trust_keys);
    if (!keys.ok()) problems.push_back("--trust-key: " + keys.status().message());
  }
  for (const auto& [name, spec] : o.models) {
    if (seedd::IsOriginUrl(spec.string())) {
      seedd::Status url = seedd::CheckOriginUrl(spec.string());
      if (!url.ok()) problems.push_back("--model " + name + ": " + url.message());
      continue;
    }
    seedd::Result<std::filesystem::path> dir = seedd::ResolveModelDir(spec.string());
    if (!dir.ok()) {
      problems.push_back("--model " + name + ": " + dir.status().message());
      continue;
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(*dir, ec)) {
      problems.push_back("--model " + name + ": " + dir->string() + " is not a directory" +
                         (ec ? " (" + ec.message() + ")" : ""));
    } else if (::access(dir->c_str(), R_OK | X_OK) != 0) {
      problems.push_back("--model " + name + ": " + dir->string() + " cannot be read (" +
                         std::strerror(errno) + ")");
    }
  }
  // The cache directory, or the nearest directory above it that exists.
  std::filesystem::path cache = o.cache_dir;
  std::error_code ec;
  while (!cache.empty() && !std::filesystem::exists(cache, ec) && cache != cache.parent_path()) {
    cache = cache.parent_path();
  }
  if (cache.empty()) cache = ".";
  if (!std::filesystem::is_directory(cache, ec)) {
    problems.push_back("--cache-dir " + o.cache_dir.string() + ": " + cache.string() +
                       " is not a directory");
  } else if (::access(cache.c_str(), W_OK | X_OK) != 0) {
    problems.push_back("--cache-dir " + o.cache_dir.string() + ": " + cache.string() +
                       " cannot be written (" + std::strerror(errno) + ")");
  }
  for (const std::string& url : o.store_urls) {
    if (seedd::Status st = seedd::CheckStoreUrl(url); !st.ok()) {
      problems.push_back("--store: " + st.message());
    }
  }
  if (!o.registry_url.empty()) {
    if (seedd::Status st = seedd::CheckStoreUrl(o.registry_url); !st.ok()) {
      problems.push_back("--registry: " + st.message());
    } else if (o.registry_url.rfind("redis://", 0) != 0) {
      problems.push_back("--registry: " + seedd::RedactStoreUrl(o.registry_url) +
                         " is not a redis:// URL");
    }
  }
  if (!factors_file.empty()) {
    auto parsed = seedd::ParseCompileFactors(factors, factors_file);
    if (!parsed.ok()) problems.push_back("--factors-file: " + parsed.status().message());
  }
  return problems;
}

// Applies --config FILE to `app`, parsed already from the command line: each
// setting of the file whose flag the command line does not give is parsed
// alone first (so a bad value names its line), then all of them before the
// command line's arguments. Returns 0, or the exit status after an error.
int ApplyConfig(CLI::App& app, const std::string& file, int argc, char** argv) {
  auto entries = seedd::ReadConfigFile(file, app);
  if (!entries.ok()) return Fail(entries.status().message());
  std::vector<std::string> given;  // flags on the command line: they override the file
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() > 0) given.push_back(opt->get_name());
  }
  std::vector<std::string> args;
  for (const seedd::ConfigEntry& e : *entries) {
    if (std::find(given.begin(), given.end(), app.get_option(e.flag)->get_name()) != given.end()) {
      continue;
    }
    std::vector<std::string> alone(e.args.rbegin(), e.args.rend());
    app.clear();
    try {
      app.parse(alone);
    } catch (const CLI::ParseError& error) {
      return Fail(e.where + ": " + error.what());
    }
    g_from_config[e.flag] = e.where;
    args.insert(args.end(), e.args.begin(), e.args.end());
  }
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::reverse(args.begin(), args.end());
  app.clear();
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    return Fail(seedd::ExplainParseError(app, error, argc, argv) + "; see --help");
  }
  return 0;
}

// Idle peers and many concurrent seeds need descriptors; take what the hard limit allows.
void RaiseFileLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "seedd: the seeding daemon. Serves this host's warm state (artifacts in its cache\n"
      "directory, FlashInfer autotune tables) to peer daemons over an authenticated\n"
      "control channel; at start it warms itself from shared stores or a warm peer\n"
      "(--warmup) before it prints 'seedd: serving on HOST:PORT'. The shared token comes\n"
      "from --token-file or SEEDD_TOKEN; never put it on a command line."};
  app.set_version_flag("--version", std::string("seedd ") + SEEDD_VERSION_STRING);
  std::string config_file;
  bool check_config = false;
  app.add_option("--config", config_file,
                 "a TOML file of settings: each key a long flag without '--' (listen = "
                 "\"0.0.0.0:7420\", source = [\"origin:7420\"], no-autotune = true); flags on "
                 "the command line override it. An unknown key or a bad value is an error "
                 "naming the file, line and key (docs/operations.md has a complete example)")
      ->check(CLI::ExistingFile);
  app.add_flag(
      "--check-config", check_config,
      "check the flags and --config file (syntax, keys, values, addresses, the token "
      "file) and open what can be opened without side effects (TLS files parse and the key "
      "matches the certificate, signing and trusted keys load, model directories can be read, "
      "the cache directory can be written, store URLs parse, the factors file reads); print "
      "'seedd: configuration OK' and exit 0 without starting, else each problem and exit 1. "
      "Stores and sources are not contacted");
  std::string listen = "127.0.0.1:7420";
  std::vector<std::string> sources;
  std::string token_file;
  std::string cache_dir;
  std::string log_level = "info";
  std::string log_format = "text";
  std::string admin_listen;
  std::string listen_plain;
  seedd::TlsOptions tls;
  size_t max_connections = 1024;
  seedd::TransportOptions limits;  // the per-host bounds set by flags
  size_t resolver_threads = 64;
  std::vector<std::string> stores;
  std::vector<std::string> models;
  std::vector<std::string> pulls;
  std::string sign_key;
  std::vector<std::string> trust_keys;
  std::string advertise;
  std::string chunk_mib = "auto";
  std::string chunk_digest = "sha256";
  std::string verify = "chunks";
  std::vector<std::string> warmups;
  std::vector<size_t> named_caches;  // options.compile_caches known by name
  std::string compile_key;
  std::vector<std::string> compile_factors;
  std::string compile_factors_file;
  std::string engine_python = "python3";
  seedd::AutotuneOptions autotune;
  std::string autotune_root;
  bool no_autotune = false;
  app.add_option("--listen", listen,
                 "HOST:PORT or [V6ADDR]:PORT to serve peers on; port 0 picks a free port. "
                 "Plain TCP unless --tls-cert is given (then TLS 1.3 only): without TLS keep it on "
                 "a trusted network")
      ->capture_default_str();
  app.add_option("--source", sources,
                 "HOST:PORT of a warm peer daemon (repeatable): kinds adopting at start seed "
                 "from the first; --pull fetches from all of them")
      ->take_all();
  app.add_option("--token-file", token_file,
                 "path of a file holding the shared token, or several, one per line: the first "
                 "is sent, any is accepted; re-read on SIGHUP, so a fleet rotates tokens without "
                 "a restart (default: the SEEDD_TOKEN environment variable, which holds one "
                 "token itself, not a path)");
  app.add_option("--cache-dir", cache_dir,
                 "local artifact store (default: $XDG_CACHE_HOME/seedd, else ~/.cache/seedd)");
  app.add_option("--store", stores,
                 "shared store URL, consulted after the local cache in the order given "
                 "(repeatable): file:///mount, redis://[:PASSWORD@]HOST:PORT[/DB][?prefix=P&"
                 "ttl=S&timeout_ms=N], s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT&region=R")
      ->take_all();
  app.add_option("--model", models,
                 "serve a model as weight_shards: NAME=DIR, or NAME=hf:ORG/NAME[@REVISION] for a "
                 "snapshot in the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else "
                 "~/.cache/huggingface/hub), or NAME=oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]"
                 " for a model in an OCI registry (a ModelPack artifact; fetched at start into "
                 "<cache-dir>/weights/origins/NAME/, every file verified against its layer "
                 "digest; files already held with the same digest are copied, not fetched) "
                 "(repeatable); its manifest is built at start, chunk digests cached in the "
                 "cache directory")
      ->take_all();
  std::string origin_auth;
  app.add_option("--origin-auth", origin_auth,
                 "registry credentials for oci:// models: a file as `docker login`, `podman "
                 "login` or `skopeo login` writes it ({\"auths\": {\"HOST:PORT\": {\"auth\": "
                 "base64 of user:password}}}); never on the command line")
      ->check(CLI::ExistingFile);
  std::string origin_ca;
  double origin_range_mib = 64;
  app.add_option("--origin-range-mib", origin_range_mib,
                 "files of oci:// and s3:// models larger than this many MiB are fetched as "
                 "ranged GETs of this size, 4 at once, and checked whole (one connection to an "
                 "object store carries less than a host's link); with --registry, each range "
                 "is a piece one daemon fetches and the fleet pulls as soon as it lands; 0: one "
                 "GET per file")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1048576.0));
  app.add_option("--origin-ca", origin_ca,
                 "PEM CA bundle trusted for https registries of oci:// models (default: the "
                 "system's)")
      ->check(CLI::ExistingFile);
  app.add_option("--pull", pulls,
                 "fetch model NAME (or NAME@ROOT_DIGEST: only that version, any other "
                 "refused) from --source at start, verified and resumable, into "
                 "<cache-dir>/weights/NAME/<root digest> (NAME/current points at it); then "
                 "serve it (repeatable). While pulling, the daemon already serves the chunks it "
                 "has verified to other fetchers (a relay). NAME=oci://...|s3://...: the model "
                 "from where it lives, with no daemon holding it, as --model NAME=URL (with "
                 "--registry, fetched from upstream once per fleet)")
      ->take_all();
  int64_t pull_timeout = 1800;
  double used_grace = 600;
  std::string zone;
  int keep_versions = 2;
  std::string registry;
  app.add_option("--registry", registry,
                 "redis:// URL of a registry shared by the fleet: this daemon announces the "
                 "models it serves and pulls there, and its pulls take relays from it (a swarm "
                 "then spans several sources and outlives a source's restart)");
  size_t max_neighbours = 16;
  app.add_option("--max-neighbours", max_neighbours,
                 "peers a --pull fetches from at once (sources and relays; other relays it "
                 "learns of replace those that fail): bounds its connections whatever the "
                 "fleet's size")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  std::string relay_upload_pacing = "capacity";
  app.add_option("--relay-upload-pacing", relay_upload_pacing,
                 "while a --pull runs, how this daemon paces what it sends of that model to "
                 "other fetchers, with no rate to know: 'capacity' (measures what its uplink "
                 "delivers, from the bytes its uploads' receivers acknowledge, and holds uploads "
                 "to 90% of it once it stops growing, so that this host's own chunk requests "
                 "and acknowledgements do not queue behind them; probes for more when uploads "
                 "wait), 'delay' (from the queueing its uploads meet, as LEDBAT does for "
                 "BitTorrent; experimental: on shaped test links it slowed a fleet's pull) or "
                 "'off' (only --relay-upload-rate, when set)")
      ->capture_default_str()
      ->check(CLI::IsMember({"capacity", "delay", "off"}));
  std::string relay_upload_rate = "0";
  app.add_option("--relay-upload-rate", relay_upload_rate,
                 "while a --pull runs, the most this daemon sends per second of that model to "
                 "other fetchers: 45mbit, 2.5gbit, 100MB (0: no limit). Set it a little below "
                 "the host's uplink (e.g. 90% of a VM's egress limit) when the uplink is the "
                 "bottleneck: a full uplink queues the host's own chunk requests and TCP "
                 "acknowledgements behind its uploads and slows its own pull. Once the pull "
                 "completes the model is served at full speed")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            seedd::Result<uint64_t> rate = seedd::ParseRate(value, "--relay-upload-rate");
            if (rate.ok()) return "";
            const std::string& why = rate.status().message();
            return why.substr(why.find(' ') + 1);  // CLI11 names the flag
          },
          "RATE"));
  app.add_option("--keep-versions", keep_versions,
                 "after a --pull, the versions of that model kept in the cache, current "
                 "included; older ones and staging left by abandoned pulls are removed "
                 "(seedctl gc does the same by hand)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--zone", zone,
                 "with --registry: this daemon's zone (a rack, a building), published with its "
                 "status (seedctl status --fleet); seedctl preheat --zone asks only its daemons")
      ->check([](const std::string& z) -> std::string {
        return seedd::IsZoneName(z) ? "" : "at most 64 letters, digits, '-', '_' and '.'";
      });
  app.add_option("--used-grace", used_grace,
                 "seconds after a warmup installs files (a compile cache, an autotune table, a "
                 "pulled model) within which another process should open one of them; else a "
                 "warning says the engine rebuilt instead (/status and seedctl status count the "
                 "files opened either way)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 7.0 * 24 * 3600));
  app.add_option("--pull-timeout", pull_timeout,
                 "seconds --pull keeps retrying (backoff 0.5 s doubling to 30 s, with jitter) "
                 "while no source serves the model: sources that start later or restart are "
                 "waited for; readiness waits too")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{7 * 24 * 3600}));
  app.add_option("--chunk-mib", chunk_mib,
                 "chunk size of the manifests of --model, in MiB (fractions go by 64 KiB: "
                 "0.25 = 256 KiB), or auto: about 1,024 chunks per model, a power of two from "
                 "256 KiB to 64 MiB. The unit of verification, retry and relaying: a fleet "
                 "pulling at once comes closer to one host's time with more chunks")
      ->capture_default_str()
      ->check(seedd::ChunkMibValidator());
  app.add_option("--chunk-digest", chunk_digest,
                 "digest of each chunk in the manifests of --model: sha256 (holds against a "
                 "relay forging chunks) or xxh3 (XXH3-128: catches corruption only, at memory "
                 "speed; for fleets whose relays are all trusted). Fetchers verify whatever the "
                 "manifest names, and pinning (NAME@H) covers the choice")
      ->capture_default_str()
      ->check(CLI::IsMember({"xxh3", "sha256"}));
  app.add_option("--verify", verify,
                 "what --pull checks: chunks (every chunk's digest, always); sha256: also "
                 "every file's SHA-256 before the model is committed (one more read of it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"chunks", "sha256"}));
  app.add_option("--advertise", advertise,
                 "HOST:PORT other daemons reach this one at, announced to sources while "
                 "pulling (default: the --listen address unless it is a wildcard)");
  app.add_option("--warmup", warmups,
                 "warmup cache to run before reporting ready (repeatable): flashinfer_autotune, "
                 "compile_cache:NAME for a cache seedd knows (triton, inductor, vllm, "
                 "flashinfer, deepgemm, cuda, torch_extensions: its directory from the "
                 "consumer's own variable or default, its key factors read from --python), or "
                 "compile_cache:NAME=DIR for any other (with --compile-key and --factor). A "
                 "cache is seeded when empty from the local disk, the stores, then --source; "
                 "then published and served")
      ->check([](const std::string& w) -> std::string {
        if (w == "flashinfer_autotune") return "";
        if (w.rfind(kCompileWarmup, 0) == 0) {
          const std::string rest = w.substr(kCompileWarmup.size());
          const size_t eq = rest.find('=');
          if (eq == std::string::npos) {
            if (seedd::FindKnownCompileCache(rest) != nullptr) return "";
            seedd::Result<seedd::CompileCacheSpec> known =
                seedd::KnownCompileCacheSpec(rest, {}, seedd::ProcessEnvironment());
            return std::string(known.status().message());
          }
          if (eq > 0 && eq + 1 < rest.size()) return "";
        }
        return "expected flashinfer_autotune, compile_cache:NAME or compile_cache:NAME=DIR, got '" +
               w + "'";
      });
  app.add_option("--python", engine_python,
                 "the engine's Python interpreter: the versions of torch, triton, vllm, "
                 "flashinfer and deep_gemm in its environment, the compiler and the GPU are the "
                 "key factors of the compile caches named by --warmup compile_cache:NAME")
      ->capture_default_str();
  app.add_option("--compile-key", compile_key,
                 "the configuration the compile caches are for, 16-128 lowercase hex (e.g. a "
                 "hash of the model and its compile settings); required with "
                 "compile_cache:NAME=DIR; for a cache named alone, the default is the SHA-256 of "
                 "its name and key factors");
  app.add_option("--factor", compile_factors,
                 "NAME=VALUE, repeatable: a key factor of the compile caches (triton=3.1.0, "
                 "torch=2.5.1, cuda=12.4, arch=sm90); a bundle built under other factors is "
                 "rejected, naming each");
  app.add_option("--factors-file", compile_factors_file,
                 "a JSON object of the compile caches' key factors (with --factor on top)");
  app.add_option("--autotune-runner", autotune.runner,
                 "the autotune pass: cpu-gemm (built in: times real SGEMM kernels) or "
                 "'command:PROGRAM ARGS' (run with SEEDD_AUTOTUNE_TABLE=PATH, SEEDD_DP_RANK, "
                 "SEEDD_RANK; the file it leaves is the tuned table)")
      ->capture_default_str();
  app.add_option("--autotune-shapes", autotune.gemm_shapes,
                 "cpu-gemm shapes to tune, MxNxK[,MxNxK...] (default: a 20-60 s pass)");
  app.add_option("--autotune-root", autotune_root,
                 "where the autotune tables live (default: <cache-dir>/flashinfer_autotune)");
  app.add_option("--config-hash", autotune.config_hash,
                 "names the model configuration the table is for, 16-128 lowercase hex "
                 "(default: SHA-256 of the runner's configuration)");
  app.add_option("--dp-rank", autotune.dp_rank, "data-parallel rank of this engine")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rank", autotune.rank, "rank of this engine in its world group")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-autotune", no_autotune, "skip the autotune pass (the warmup gate)");
  app.add_flag("--autotune-pass-token", autotune.pass_token,
               "hand SEEDD_TOKEN on to a command: autotune runner (by default it is removed "
               "from the runner's environment)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--log-format", log_format,
                 "text (one line per event) or json (one object per line: time, level, event, "
                 "fields) for log pipelines")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--tls-cert", tls.cert,
                 "PEM certificate (chain) of this daemon: --listen speaks TLS 1.3 only, on the "
                 "control and the data plane; re-read on SIGHUP");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert (re-read on SIGHUP)");
  app.add_option("--tls-ca", tls.ca,
                 "PEM CA bundle: this daemon's own connections (--source, --pull, relays) use "
                 "TLS and verify their peers against it; with --tls-client-auth, clients too");
  app.add_flag("--tls-client-auth", tls.client_auth,
               "mTLS: require every client to present a certificate chained to --tls-ca");
  app.add_option("--tls-server-name", tls.server_name,
                 "the name peers' certificates must carry (default: the host connected to)");
  app.add_option("--sign-key", sign_key,
                 "PEM Ed25519 private key: sign the manifests of --model and the compile cache "
                 "bundles this daemon publishes (openssl genpkey -algorithm ed25519)");
  app.add_option("--trust-key", trust_keys,
                 "PEM Ed25519 public key (repeatable): install only manifests and compile cache "
                 "bundles signed by one of them, from peers, stores and local copies alike; "
                 "anything else is refused, the signer's fingerprint in the log");
  app.add_option("--listen-plain", listen_plain,
                 "with TLS, also serve plain TCP here: the compatibility path for peers that "
                 "cannot speak TLS (the reference implementation); keep it on a trusted network");
  app.add_option("--admin-listen", admin_listen,
                 "HOST:PORT to serve /metrics (Prometheus), /healthz, /readyz (503 until every "
                 "warmup and pull at start is done) and /status (JSON) over HTTP; no token: "
                 "bind it to loopback or a management network (default: off)");
  app.add_option("--max-connections", max_connections,
                 "open peer connections beyond this are closed at once")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--max-unauthenticated-per-address", limits.max_unauthenticated_per_address,
                 "connections one host (an IPv4 address, an IPv6 /64) may hold before it "
                 "authenticates; three quarters of --max-connections is the total for all hosts")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--max-data-connections-per-address", limits.max_streams_per_address,
                 "weight data connections one host may hold at once")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--max-auth-failures", limits.max_auth_failures,
                 "failed authentications from one host within 10 s after which its connections "
                 "are refused until the 10 s end")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--resolver-threads", resolver_threads,
                 "most threads answering requests off the event loop; two stay warm, more start "
                 "while all are busy (each slow request holds one)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1024}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(seedd::ExplainParseError(app, e, argc, argv) + "; see --help");
  }
  if (!config_file.empty()) {
    if (int failed = ApplyConfig(app, config_file, argc, argv); failed != 0) return failed;
  }

  if (!seedd::SetLogLevel(log_level)) return Fail("--log-level: unknown level '" + log_level + "'");
  seedd::SetLogFormat(log_format);
  seedd::DaemonOptions options;
  auto parsed_listen = seedd::ParseHostPort(listen);
  if (!parsed_listen.ok()) return Fail("--listen: " + parsed_listen.status().message());
  options.seed.listen = *parsed_listen;
  for (const std::string& text : sources) {
    auto parsed_source = seedd::ParseHostPort(text);
    if (!parsed_source.ok()) return Fail("--source: " + parsed_source.status().message());
    if (!options.seed.source.has_value()) {
      options.seed.source = *parsed_source;
    } else {
      options.more_sources.push_back(*parsed_source);
    }
  }
  std::optional<std::filesystem::path> token_path;
  if (!token_file.empty()) token_path = token_file;
  auto tokens = seedd::LoadTokens(token_path);
  if (!tokens.ok()) return Fail(tokens.status().message());
  if (seedd::Status strong =
          seedd::CheckTokenStrength(*tokens, token_path ? token_path->string() : "SEEDD_TOKEN");
      !strong.ok()) {
    return Fail(strong.message());
  }
  if (tokens->empty() && (!listen.empty() || !sources.empty())) {
    return Fail(
        "no token: pass --token-file FILE (a file holding the fleet's token, e.g. made with "
        "`openssl rand -hex 32 > FILE`) or set SEEDD_TOKEN to the token itself");
  }
  if (!tokens->empty()) {
    options.seed.token = tokens->front();
    options.accepted_tokens.assign(tokens->begin() + 1, tokens->end());
  }
  options.cache_dir =
      cache_dir.empty() ? seedd::DefaultCacheDir() : std::filesystem::path(cache_dir);
  options.transport.max_connections = max_connections;
  options.transport.max_unauthenticated_per_address = limits.max_unauthenticated_per_address;
  options.transport.max_streams_per_address = limits.max_streams_per_address;
  options.transport.max_auth_failures = limits.max_auth_failures;
  options.store_urls = stores;
  // --pull NAME=oci://...|s3://...: the model from its upstream, as --model
  // NAME=URL (with --registry, fetched once per fleet); relayed as it lands.
  for (const std::string& p : pulls) {
    const size_t eq = p.find('=');
    if (eq != std::string::npos && seedd::IsOriginUrl(p.substr(eq + 1))) {
      models.push_back(p);
    } else {
      options.pulls.push_back(p);
    }
  }
  options.pull_timeout = std::chrono::seconds(pull_timeout);
  options.used_grace = std::chrono::milliseconds(static_cast<int64_t>(used_grace * 1000));
  options.zone = zone;
  options.keep_versions = keep_versions;
  options.max_neighbours = max_neighbours;
  options.origin_access.auth_file = origin_auth;
  options.origin_access.ca_file = origin_ca;
  options.origin_access.range_bytes = static_cast<uint64_t>(origin_range_mib * (1 << 20));
  options.relay_upload_rate = *seedd::ParseRate(relay_upload_rate, "--relay-upload-rate");
  options.relay_upload_pacing = relay_upload_pacing;
  options.registry_url = registry;
  options.weight_chunk_bytes = seedd::ChunkBytesOfFlag(chunk_mib);
  options.weight_chunk_digest = chunk_digest;
  options.verify_pulled_files = verify == "sha256";
  options.tls = tls;
  options.sign_key = sign_key;
  options.trust_keys.assign(trust_keys.begin(), trust_keys.end());
  if (!listen_plain.empty()) {
    auto parsed = seedd::ParseHostPort(listen_plain);
    if (!parsed.ok()) return Fail("--listen-plain: " + parsed.status().message());
    options.listen_plain = *parsed;
  }
  if (!admin_listen.empty()) {
    auto parsed = seedd::ParseHostPort(admin_listen);
    if (!parsed.ok()) return Fail("--admin-listen: " + parsed.status().message());
    options.admin_listen = *parsed;
  }
  if (!advertise.empty()) {
    auto parsed = seedd::ParseHostPort(advertise);
    if (!parsed.ok()) return Fail("--advertise: " + parsed.status().message());
    options.advertise = *parsed;
  }
  for (const std::string& m : models) {
    size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      return Fail("--model: expected NAME=DIR, got '" + m + "'");
    }
    for (const auto& [name, dir] : options.models) {
      if (name == m.substr(0, eq)) {
        return Fail("--model: " + name + " is given twice (" + dir.string() + " and " +
                    m.substr(eq + 1) + ")");
      }
    }
    options.models.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
  autotune.warmup = false;
  {
    // The pairs and names here; the factors file is read at start (not by
    // --check-config, which checks the settings, not the files they name).
    seedd::Result<seedd::CompileFactors> pairs = seedd::ParseCompileFactors(compile_factors);
    if (!pairs.ok()) return Fail("--factor: " + std::string(pairs.status().message()));
    for (const std::string& w : warmups) {
      if (w == "flashinfer_autotune") {
        autotune.warmup = true;
        continue;
      }
      const size_t eq = w.find('=');
      seedd::CompileCacheSpec spec;
      if (eq == std::string::npos) {
        // Known by name: its directory and factors are read at start.
        spec.name = w.substr(kCompileWarmup.size());
        spec.key = compile_key.empty() ? std::string(64, '0') : compile_key;
        named_caches.push_back(options.compile_caches.size());
        options.compile_caches.push_back(std::move(spec));
        continue;
      }
      spec.name = w.substr(kCompileWarmup.size(), eq - kCompileWarmup.size());
      spec.dir = ExpandHome(w.substr(eq + 1));
      spec.key = compile_key;
      if (compile_key.empty()) {
        return Fail("--warmup " + w + " needs --compile-key (16-128 lowercase hex)");
      }
      seedd::Status key =
          seedd::ValidateCompileCacheKey(seedd::Json{{"namespace", spec.name}, {"key", spec.key}});
      if (!key.ok()) return Fail("--warmup " + w + ": " + std::string(key.message()));
      options.compile_caches.push_back(std::move(spec));
    }
  }
  autotune.enabled = !no_autotune;
  autotune.root = autotune_root;
  options.autotune = autotune;
  options.transport.max_resolver_threads = resolver_threads;
  if (check_config) {
    const std::vector<std::string> problems =
        CheckFiles(options, compile_factors, compile_factors_file);
    for (const std::string& p : problems) std::fprintf(stderr, "seedd: %s\n", p.c_str());
    if (!problems.empty()) {
      std::fprintf(stderr, "seedd: configuration has %zu problem(s)\n", problems.size());
      return 1;
    }
    std::printf("seedd: configuration OK\n");
    return 0;
  }
  if (!options.compile_caches.empty()) {
    seedd::Result<seedd::CompileFactors> factors =
        seedd::ParseCompileFactors(compile_factors, compile_factors_file);
    if (!factors.ok()) return Fail(std::string(factors.status().message()));
    for (seedd::CompileCacheSpec& spec : options.compile_caches) spec.factors = *factors;
    // Caches named alone: the consumer's directory and the factors its cache
    // depends on, read from the engine's Python; --factor on top.
    if (!named_caches.empty()) {
      seedd::Result<seedd::CompileFactors> probed = seedd::ProbeEngineEnvironment(engine_python);
      if (!probed.ok()) {
        return Fail("--warmup compile_cache:" + options.compile_caches[named_caches[0]].name +
                    ": " + std::string(probed.status().message()) +
                    " (name the engine's interpreter with --python PATH)");
      }
      for (size_t i : named_caches) {
        seedd::CompileCacheSpec& spec = options.compile_caches[i];
        seedd::Result<seedd::CompileCacheSpec> known =
            seedd::KnownCompileCacheSpec(spec.name, *probed, seedd::ProcessEnvironment());
        if (!known.ok()) return Fail(std::string(known.status().message()));
        for (const auto& [k, v] : *factors) known->factors[k] = v;
        known->key =
            compile_key.empty() ? seedd::DefaultCompileKey(spec.name, known->factors) : compile_key;
        std::string shown;
        for (const auto& [k, v] : known->factors)
          shown += (shown.empty() ? "" : ", ") + k + "=" + v;
        seedd::Logger().info("compile_cache {}: {} (key {}; factors {})", spec.name,
                             known->dir.string(), known->key.substr(0, 16), shown);
        spec.dir = known->dir;
        spec.factors = known->factors;
        spec.key = known->key;
      }
    }
  }

  RaiseFileLimit();
  // Block the signals before any thread starts so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = seedd::Daemon::Create(std::move(options));
  if (!daemon.ok()) return Fail(daemon.status().message());
  // A stop signal is obeyed at every moment: during a warmup or a pull it
  // cancels them (a pull keeps its journal), then the daemon stops. SIGHUP
  // re-reads the token file (a rotation); a file that cannot be read keeps the
  // tokens in use.
  std::atomic<int> received{0};
  std::thread waiter([&] {
    int sig = 0;
    for (;;) {
      sigwait(&stop_signals, &sig);
      if (sig != SIGHUP) break;
      if (seedd::Status tls_reloaded = (*daemon)->ReloadTls(); !tls_reloaded.ok()) {
        seedd::Logger().error("Received SIGHUP; keeping the TLS files in use: {}",
                              tls_reloaded.message());
      } else if (!tls.cert.empty() || !tls.ca.empty()) {
        seedd::Logger().info("Received SIGHUP; TLS certificate, key and CA read again");
      }
      auto reread = seedd::LoadTokens(token_path);
      seedd::Status replaced =
          !reread.ok() ? reread.status()
                       : seedd::CheckTokenStrength(
                             *reread, token_path ? token_path->string() : "SEEDD_TOKEN");
      if (replaced.ok()) replaced = (*daemon)->ReplaceTokens(*reread);
      if (replaced.ok()) {
        seedd::Logger().info("Received SIGHUP; {} token(s) from {}; sending the first",
                             reread->size(), token_path ? token_path->string() : "SEEDD_TOKEN");
      } else {
        seedd::Logger().error("Received SIGHUP; keeping the current tokens: {}",
                              replaced.message());
      }
    }
    received = sig;
    seedd::Logger().info("Received {}; stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    (*daemon)->Cancel();
  });
  // systemd (Type=notify): STATUS= every 2 s while warmups and pulls run, READY=1
  // once they are done and the daemon serves.
  const seedd_app::SystemdNotifier notifier;
  std::mutex status_mu;
  std::condition_variable status_cv;
  bool started = false;  // GUARDED_BY(status_mu)
  std::thread status_reporter;
  if (notifier.enabled()) {
    notifier.Send("STATUS=starting");
    status_reporter = std::thread([&] {
      std::unique_lock<std::mutex> lock(status_mu);
      while (!status_cv.wait_for(lock, std::chrono::seconds(2), [&] { return started; })) {
        const std::string line = seedd_app::StatusLineOf((*daemon)->StatusJson());
        if (!line.empty()) notifier.Send("STATUS=" + line);
      }
    });
  }
  auto stop_reporter = [&] {
    {
      std::lock_guard<std::mutex> lock(status_mu);
      started = true;
    }
    status_cv.notify_all();
    if (status_reporter.joinable()) status_reporter.join();
  };
  auto bound = (*daemon)->Start();
  stop_reporter();
  if (!bound.ok()) {
    if (received != 0) {
      waiter.join();
      (*daemon)->Stop();
      seedd::Logger().info("Stopped before ready: {}", bound.status().message());
      return 0;
    }
    waiter.detach();  // still waiting for a signal; the process ends now
    return Fail(bound.status().message());
  }
  std::printf("seedd: serving on %s\n", (*bound)->ToString().c_str());
  std::fflush(stdout);
  notifier.Send("READY=1\nSTATUS=serving on " + (*bound)->ToString());
  waiter.join();
  notifier.Send("STOPPING=1\nSTATUS=stopping");
  (*daemon)->Stop();
  seedd::Logger().info("Stopped");
  return 0;
}
