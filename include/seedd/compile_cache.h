// The kind "compile_cache": a compiler's whole cache directory (Triton's
// ~/.triton/cache, TorchInductor's, vLLM's torch.compile cache) seeded as one
// bundle.
//
// Key fields {"namespace" ([a-z0-9_.-]{1,64}, the cache's name), "key" (16-128
// lowercase hex: the configuration it was compiled for)}. The payload, a
// bundle:
//   {"namespace", "key", "factors": {NAME: VALUE, ...},
//    "files": [{"path", "size", "sha256", "mtime_ns", "data" (base64)}, ...],
//    "total_size"}
// `factors` are the consumer's own key factors the cache was built under
// (triton, torch and CUDA versions, the GPU architecture...). A target compares
// them with its own as FlashInfer compares an autotune table's _metadata: any
// difference rejects the bundle, the error naming each factor, remote and
// local. Paths are relative and checked (no "..", no absolute path, no empty
// component); every file is verified against its size and SHA-256. Installing
// writes every file to a staging directory inside the target first, then
// renames each into place, never over a file that is already there and as new
// or newer.
//
// Up to kMaxInlineCompileCacheBytes of files travel inline, in the bundle (the
// control channel's responses are capped at 64 MiB). A larger cache travels on
// the weights data plane: its bundle lists each file's path, size, SHA-256 and
// time without "data", and names the content,
//   "content": {"model": CompileCacheModelName(ns, key), "root_digest": R},
// a model the bundling daemon serves from the cache directory. A target pulls
// that model pinned to R (chunked, verified, resumable and relayed, as weights
// are) and installs each file after checking it against the bundle's SHA-256.
// A signature covers "content" with the rest, so a signed bundle pins the bytes.
// Thread safety: the functions are; the seedable's Resolve is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/artifact_store.h"
#include "seedd/json.h"
#include "seedd/seed_transport.h"
#include "seedd/seedable.h"
#include "seedd/signing.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr std::string_view kCompileCacheKind = "compile_cache";
// Files of a bundle that carries them inline; with base64 and JSON the
// response stays under 64 MiB. Larger caches travel on the data plane.
inline constexpr uint64_t kMaxInlineCompileCacheBytes = 44ull << 20;
// No cap on a cache's size by default: a target checks that its disk has room.
inline constexpr uint64_t kMaxCompileCacheBytes = UINT64_MAX;
inline constexpr size_t kMaxCompileCacheFiles = 100000;

// The model a cache larger than kMaxInlineCompileCacheBytes is served as:
// "compile_cache.NS.KEY" (the key's first 48 digits).
std::string CompileCacheModelName(std::string_view ns, std::string_view key);

// The weights data plane, for bundles too large to travel inline. The daemon
// provides it; without one such caches are not bundled.
class CompileCacheDataPlane {
 public:
  virtual ~CompileCacheDataPlane() = default;
  // Serves the files `paths` (relative) of `dir` as model `model` from now on;
  // returns the manifest's root digest and fills `sha256` (by path).
  virtual Result<std::string> Serve(const std::string& model, const std::filesystem::path& dir,
                                    const std::vector<std::string>& paths,
                                    std::map<std::string, std::string>* sha256) = 0;
  // Pulls `model` pinned to `root_digest` from the daemon's sources (relaying
  // what is verified meanwhile) and returns the directory holding its files.
  virtual Result<std::filesystem::path> Fetch(const std::string& model,
                                              const std::string& root_digest) = 0;
};

using CompileFactors = std::map<std::string, std::string>;

// One compile cache a daemon holds: served from `dir` as it is at each request.
struct CompileCacheSpec {
  std::string name;  // the namespace
  std::filesystem::path dir;
  std::string key;  // 16-128 lowercase hex
  CompileFactors factors;
  uint64_t max_bytes = kMaxCompileCacheBytes;
  // Signs the bundles of this cache (its bundle digest); null: unsigned.
  std::shared_ptr<const SigningKey> sign_key;
  // Installs only bundles signed by one of these keys; null: any.
  std::shared_ptr<const TrustedKeys> trust;
};

// Checks the key fields {"namespace", "key"} of `fields`; the error names the field.
Status ValidateCompileCacheKey(const Json& fields);

// Factors from "NAME=VALUE" texts and/or a JSON file holding an object of strings
// (numbers and booleans are taken as their JSON text). Names: [A-Za-z0-9_.-]{1,64}.
Result<CompileFactors> ParseCompileFactors(const std::vector<std::string>& pairs,
                                           const std::filesystem::path& json_file = {});

// The bundle of `spec.dir`'s regular files (symbolic links and other files are
// skipped), signed with spec.sign_key when set. ResourceExhausted beyond
// spec.max_bytes or kMaxCompileCacheFiles, or beyond kMaxInlineCompileCacheBytes
// without a `plane`; with one, such a cache is served on it and bundled by
// reference ("content").
Result<Json> BundleCompileCache(const CompileCacheSpec& spec,
                                CompileCacheDataPlane* plane = nullptr);

// Checks a bundle for `ns`/`key` (every path, size, digest and the cap) and its
// factors against `local`; with `trust`, that it is signed by one of its keys
// (PermissionDenied naming the keys otherwise). Returns it on success.
Result<Json> ValidateCompileCacheBundle(const Json& bundle, std::string_view ns,
                                        std::string_view key, const CompileFactors& local,
                                        uint64_t max_bytes = kMaxCompileCacheBytes,
                                        const TrustedKeys* trust = nullptr);

// What a bundle's signatures sign: SHA-256 of its canonical text without its
// "signatures" and without each file's "data" (each file's "sha256" covers it).
std::string CompileCacheBundleDigest(const Json& bundle);

// "" when equal, else "cuda: remote=12.4 vs local=12.8, ..." (a missing factor
// shows as (none)).
std::string CompareCompileFactors(const CompileFactors& remote, const CompileFactors& local);

struct CompileCacheInstall {
  size_t installed = 0;            // files written
  size_t kept_newer = 0;           // already there and as new or newer: left alone
  uint64_t bytes = 0;              // of the files written
  std::vector<std::string> paths;  // the files written, relative to the directory
};

// Whether a bundle carries its files by reference ("content"), not inline.
bool HasCompileCacheContent(const Json& bundle);

// Installs a bundle that ValidateCompileCacheBundle accepted into `dir`. A
// bundle by reference takes its files from `content_dir` (its model, pulled),
// each checked against the bundle's size and SHA-256 as it is copied: DataLoss
// naming the file on a mismatch, and nothing installed.
Result<CompileCacheInstall> InstallCompileCache(const Json& bundle,
                                                const std::filesystem::path& dir,
                                                const std::filesystem::path& content_dir = {});

// Installs a validated bundle into `dir`, pulling its content on `plane` first
// when it has one (FailedPrecondition without a plane). Checks that the disk
// holding `dir` has room for the bundle's files.
Result<CompileCacheInstall> InstallCompileCacheBundle(const Json& bundle,
                                                      const std::filesystem::path& dir,
                                                      CompileCacheDataPlane* plane);

// The seedable: Resolve serves the `served` caches from their directories,
// other keys from <cache_dir>/compile_cache (bundles published there) and then
// the shared stores. The adopting side's ctx is {"namespace", "key", "dir",
// "factors": {...}}.
// With `trust`, an adopted bundle is installed only when signed by one of its keys.
// Caches larger than kMaxInlineCompileCacheBytes are served and adopted on
// `plane` (null: not at all).
SeedablePtr NewCompileCacheSeedable(const std::filesystem::path& cache_dir,
                                    std::vector<CompileCacheSpec> served,
                                    std::vector<std::shared_ptr<ArtifactStore>> shared = {},
                                    std::shared_ptr<const TrustedKeys> trust = nullptr,
                                    std::shared_ptr<CompileCacheDataPlane> plane = nullptr);

// Compile caches seedd knows by name (`--warmup compile_cache:triton`): where
// each consumer keeps its cache (its own environment variable, else its own
// default) and the facts of the engine's environment that consumer's cache
// depends on. docs/compile-caches.md says, for each, how the consumer keys and
// checks its cache and what seedd compares.
struct KnownCompileCache {
  std::string_view name;                  // "triton"
  std::string_view env;                   // "TRITON_CACHE_DIR"
  std::string_view default_dir;           // as documented, e.g. "$HOME/.triton/cache"
  std::vector<std::string_view> factors;  // names ProbeEngineEnvironment reports
};
const std::vector<KnownCompileCache>& KnownCompileCaches();
const KnownCompileCache* FindKnownCompileCache(std::string_view name);

// The engine's environment, read by running `python` (the engine's
// interpreter) with a short probe: "python" (3.11), "machine", the versions of
// torch, triton, vllm, flashinfer and deep_gemm ("none" when not installed),
// "torch_cuda" (the CUDA torch was built with, "none" for a CPU build), "cxx"
// (the C++ compiler's version: $CXX, else c++), "nvcc", "gpu_arch", "gpu_name"
// and "driver" (from nvidia-smi; "none" without a GPU). FailedPrecondition
// naming the interpreter when it cannot run or prints no JSON object.
Result<CompileFactors> ProbeEngineEnvironment(
    const std::string& python, std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Reads an environment variable; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnvironment();

// The spec of a known cache: its directory from `env` (or the consumer's
// default, which for torch_extensions depends on the probed Python and CUDA),
// its factors taken from `probed` (each listed factor; a missing one is
// "none"), and the key DefaultCompileKey gives. NotFound for an unknown name.
Result<CompileCacheSpec> KnownCompileCacheSpec(std::string_view name, const CompileFactors& probed,
                                               const EnvLookup& env);

// The key of a cache configured by name: SHA-256 (hex) of the name and its
// factors, so caches built under other factors are other keys.
std::string DefaultCompileKey(std::string_view name, const CompileFactors& factors);

// What a daemon's warmup did for one cache.
struct CompileCacheWarmupReport {
  std::string source;  // "warm already", "local disk", "shared store <s>", "peer <addr>", "none"
  CompileCacheInstall install;
  bool published = false;     // a bundle was stored on local disk (and the shared stores)
  bool by_reference = false;  // its files came (or go) on the data plane
  double seconds = 0;
};

// The daemon's warmup of one cache: an empty `spec.dir` is seeded from the local
// disk store, the shared stores, then the transport's source (each bundle
// checked, its signature too with spec.trust); then the directory (seeded or
// warm already) is published to the local disk store and the shared stores,
// signed with spec.sign_key. With spec.trust and no spec.sign_key it is not
// published: a bundle this daemon cannot sign would replace a signed one.
// Caches larger than kMaxInlineCompileCacheBytes go on `plane` (see above).
Result<CompileCacheWarmupReport> WarmCompileCache(
    const CompileCacheSpec& spec, const std::filesystem::path& cache_dir,
    const std::vector<std::shared_ptr<ArtifactStore>>& shared, const SeedTransport& transport,
    std::shared_ptr<CompileCacheDataPlane> plane = nullptr);

}  // namespace seedd
