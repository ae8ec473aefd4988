// seedctl's subcommands and what they share: exit statuses, the connection
// flags, and how a message reaches the user.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "seedd/fleet.h"
#include "seedd/json_text.h"
#include "seedd/origins.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedctl {

// Exit statuses shared by the subcommands.
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;  // bad flags, or no response (transport failure)
constexpr int kExitMiss = 3;
constexpr int kExitError = 4;          // an error response, or a rejected payload
constexpr int kExitInterrupted = 130;  // stopped by a signal, as shells report Ctrl-C

// TLS for every connection to a daemon (--tls-ca and friends); null: plain TCP.
void SetTls(std::shared_ptr<seedd::TlsContext> tls);
const std::shared_ptr<seedd::TlsContext>& Tls();

// Prints "seedctl: MESSAGE" on stderr and returns `code`.
int Fail(const std::string& message, int code = kExitUsage);

// The flags every subcommand that talks to one daemon takes.
struct Connection {
  std::string source;
  std::string token_file;
  double timeout_s = 30;  // for the response to begin
};

// The token from --token-file or SEEDD_TOKEN; an error that names both when
// neither is set.
seedd::Result<std::string> ReadToken(const std::string& token_file);

// Sends `request` (the token added) to `source` and returns its response, a JSON
// object; the error names the source and why (connect, deadline, protocol).
seedd::Result<seedd::Json> Exchange(const seedd::HostPort& source, const std::string& token,
                                    seedd::Json request, std::chrono::milliseconds first_byte);

// An artifact key's error with what is valid spelled out (the wire keeps the
// reference's short text, e.g. "invalid config_hash").
std::string ExplainKeyError(const std::string& message);

int RunRequest(const Connection& c, const std::string& kind, const std::vector<std::string>& params,
               const std::vector<std::string>& json_params);
int RunFetch(const Connection& c, const std::string& ns, const std::string& hash,
             const std::string& filename, const std::string& cache_dir);
// seedctl fetch --kind compile_cache.
struct CompileFetchArgs {
  std::string ns, key, dir;
  std::vector<std::string> factors;  // NAME=VALUE
  std::string factors_file;
  std::vector<std::string> params;      // factor.NAME=VALUE, namespace=..., key=...
  std::vector<std::string> trust_keys;  // Ed25519 public keys: only bundles they signed
};
int RunFetchCompileCache(const Connection& c, const CompileFetchArgs& args);
int RunList(const Connection& c, const std::string& prefix);
// GET /status from a daemon's admin endpoint: a table, or the JSON with `json`.
int RunStatus(const std::string& admin, bool json, double timeout_s);
// seedctl status --fleet: every live daemon the registry knows, what it holds and pulls.
int RunFleetStatus(const std::string& registry, bool json);
// seedctl preheat: the request written; with wait_s, its progress until the
// chosen daemons hold the model (or the time is up: exit 4).
int RunPreheat(const std::string& registry, const seedd::PreheatRequest& request, double wait_s);

struct PullArgs {
  std::string token_file;
  std::vector<std::string> sources;
  std::string model;
  std::string into;
  int connections = 4;
  size_t max_neighbours = 16;
  std::string verify = "chunks";
  // Retrying sources that are down, then giving up: short for a person at a
  // terminal (a wrong address fails fast), --wait/--timeout longer for scripts.
  double timeout_s = 15;
  std::string progress = "auto";  // auto, bar, lines, json or none
  bool replace = false;
  std::vector<std::string> reuse_from;
  std::string root_digest;              // a pin: any other version is refused
  std::vector<std::string> trust_keys;  // Ed25519 public keys: only manifests they signed
  // Or straight from where the model lives (oci://, s3://), with no daemon.
  std::string from;
  std::string origin_auth;
  std::string origin_ca;
  double origin_range_mib = 64;
  std::string order;  // "index": PullOptions::order
};
int RunPull(const PullArgs& args);
// seedctl pull --from URL: the model fetched from its upstream into args.into.
int RunOriginPull(const PullArgs& args);

int RunManifest(const std::string& spec, std::string model, uint64_t chunk_bytes,
                const std::string& chunk_digest, const std::string& sign_key);
// Prints the fingerprint of each key file (as --trust-key errors name keys).
int RunKeyFingerprint(const std::vector<std::string>& files);
int RunStore(const std::string& op, const std::string& url, const std::string& key_text,
             const std::string& file);
int RunGc(const std::string& cache_dir, int keep_versions, bool dry_run);
// Writes a model directory to an OCI registry as a ModelPack artifact.
int RunPush(const std::string& url, const std::string& from, const seedd::OriginAccess& access);

}  // namespace seedctl
