// seedctl: the operator's tool. Sends one request to a daemon, or adopts one artifact.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "kinds/weights/data_plane.h"
#include "kinds/weights/manifest.h"
#include "kinds/weights/model_index.h"
#include "seedd/artifact_kind.h"
#include "seedd/daemon.h"
#include "seedd/seed_transport.h"
#include "seedd/store_registry.h"
#include "seedd_version.h"
#include "wire/json_text.h"

namespace {

// Exit statuses shared by the subcommands.
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;  // bad flags, or no response (transport failure)
constexpr int kExitMiss = 3;
constexpr int kExitError = 4;
constexpr int kExitInterrupted = 130;  // stopped by a signal, as shells report Ctrl-C  // an error
                                       // response, or a rejected payload

int Fail(const std::string& message) {
  std::fprintf(stderr, "seedctl: %s\n", message.c_str());
  return kExitUsage;
}

struct Common {
  std::string source;
  std::string token_file;
  double timeout_s = 300;
};

void AddCommon(CLI::App* cmd, Common* c) {
  cmd->add_option("--source", c->source, "HOST:PORT or [V6ADDR]:PORT of the daemon")->required();
  cmd->add_option("--token-file", c->token_file,
                  "file holding the shared token (default: the SEEDD_TOKEN environment variable)");
  cmd->add_option("--timeout", c->timeout_s, "seconds to wait for the response")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
}

// Builds the transport for `c`; on failure prints why and returns nullptr.
std::unique_ptr<seedd::SeedTransport> MakeTransport(const Common& c, int* exit_code) {
  *exit_code = kExitUsage;
  auto source = seedd::ParseHostPort(c.source);
  if (!source.ok()) {
    Fail("--source: " + source.status().message());
    return nullptr;
  }
  std::optional<std::filesystem::path> path;
  if (!c.token_file.empty()) path = c.token_file;
  auto token = seedd::LoadToken(path);
  if (!token.ok()) {
    Fail(token.status().message());
    return nullptr;
  }
  seedd::SeedConfig config;
  config.source = *source;
  config.token = *token;
  seedd::TransportOptions options;
  options.response_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000));
  std::vector<seedd::SeedablePtr> seedables;
  seedables.push_back(seedd::NewArtifactSeedable(seedd::NewMemoryArtifactStore()));
  auto transport = seedd::SeedTransport::Create(std::move(seedables), config, options);
  if (!transport.ok()) {
    Fail(transport.status().message());
    return nullptr;
  }
  return std::move(*transport);
}

int RunRequest(const Common& c, const std::string& kind, const std::vector<std::string>& params,
               const std::vector<std::string>& json_params) {
  seedd::Json request = seedd::Json::object();
  request["kind"] = kind;
  auto add = [&](const std::string& kv, bool as_json) -> std::optional<std::string> {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "expected KEY=VALUE, got '" + kv + "'";
    std::string key = kv.substr(0, eq);
    if (key == "kind" || key == "token") return "'" + key + "' cannot be set as a parameter";
    if (!as_json) {
      request[key] = kv.substr(eq + 1);
      return std::nullopt;
    }
    auto value = seedd::ParseJson(kv.substr(eq + 1));
    if (!value.ok()) return "--param-json " + key + ": " + value.status().message();
    request[key] = std::move(*value);
    return std::nullopt;
  };
  for (const auto& p : params) {
    if (auto err = add(p, false)) return Fail(*err);
  }
  for (const auto& p : json_params) {
    if (auto err = add(p, true)) return Fail(*err);
  }
  int code = 0;
  auto transport = MakeTransport(c, &code);
  if (transport == nullptr) return code;
  std::optional<seedd::Json> response = transport->Request(request);
  if (!response.has_value()) return kExitUsage;
  std::printf("%s\n", seedd::DumpJson(*response).c_str());
  auto status = response->find("status");
  if (status != response->end() && *status == "ok") return kExitOk;
  if (status != response->end() && *status == "miss") return kExitMiss;
  return kExitError;
}

int RunFetch(const Common& c, const std::string& ns, const std::string& hash,
             const std::string& filename, const std::string& cache_dir) {
  seedd::Json ctx = {{"namespace", ns}, {"config_hash", hash}, {"filename", filename}};
  auto key = seedd::ArtifactKeyFromFields(ctx);
  if (!key.ok()) return Fail(key.status().message());
  int code = 0;
  auto transport = MakeTransport(c, &code);
  if (transport == nullptr) return code;
  std::filesystem::path dir =
      cache_dir.empty() ? seedd::DefaultCacheDir() : std::filesystem::path(cache_dir);
  auto seedable = seedd::NewArtifactSeedable(dir);
  auto start = std::chrono::steady_clock::now();
  std::string why;
  seedd::AdoptOutcome outcome = transport->Adopt(*seedable, ctx, &why);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  switch (outcome) {
    case seedd::AdoptOutcome::kAdopted: {
      std::filesystem::path path = dir / ns / hash / filename;
      std::error_code ec;
      auto size = std::filesystem::file_size(path, ec);
      std::printf("fetched %s (%llu bytes) from %s in %.1f ms into %s\n", key->ToString().c_str(),
                  static_cast<unsigned long long>(ec ? 0 : size), c.source.c_str(), ms,
                  path.c_str());
      return kExitOk;
    }
    case seedd::AdoptOutcome::kMiss:
      std::fprintf(stderr, "seedctl: %s: not found on %s\n", key->ToString().c_str(),
                   c.source.c_str());
      return kExitMiss;
    case seedd::AdoptOutcome::kNoResponse:
      return kExitUsage;
    case seedd::AdoptOutcome::kNotOk:
      std::fprintf(stderr, "seedctl: %s answered: %s\n", c.source.c_str(), why.c_str());
      return kExitError;
    case seedd::AdoptOutcome::kRejected:
      std::fprintf(stderr, "seedctl: rejected what %s sent: %s\n", c.source.c_str(), why.c_str());
      return kExitError;
  }
  return kExitError;
}

int RunManifest(const std::string& spec, std::string model, uint64_t chunk_mib) {
  auto dir = seedd::ResolveModelDir(spec);
  if (!dir.ok()) {
    std::fprintf(stderr, "seedctl: %s\n", dir.status().message().c_str());
    return kExitError;
  }
  std::error_code ec;
  if (model.empty() && spec.rfind("hf:", 0) == 0) {
    // hf:ORG/NAME[@REVISION] is named NAME.
    std::string repo = spec.substr(
        3, spec.find('@') == std::string::npos ? std::string::npos : spec.find('@') - 3);
    model = repo.substr(repo.find('/') + 1);
  } else if (model.empty()) {
    model = std::filesystem::weakly_canonical(*dir, ec).filename().string();
  }
  seedd::BuildOptions options;
  options.chunk_size = chunk_mib << 20;
  auto manifest = seedd::BuildManifest(model, *dir, options);
  if (!manifest.ok()) {
    std::fprintf(stderr, "seedctl: %s\n", manifest.status().message().c_str());
    return kExitError;
  }
  std::printf("%s\n", manifest->ToJson().dump(2).c_str());
  return kExitOk;
}

int RunPull(const Common& c, const std::vector<std::string>& source_texts, const std::string& model,
            const std::string& into, int connections, const std::string& verify) {
  std::vector<seedd::HostPort> sources;
  for (const auto& t : source_texts) {
    auto hp = seedd::ParseHostPort(t);
    if (!hp.ok()) return Fail("--source: " + hp.status().message());
    sources.push_back(*hp);
  }
  std::optional<std::filesystem::path> path;
  if (!c.token_file.empty()) path = c.token_file;
  auto token = seedd::LoadToken(path);
  if (!token.ok()) return Fail(token.status().message());
  // The manifest from the first source that answers.
  std::optional<seedd::Manifest> manifest;
  int code = kExitUsage;
  for (const auto& source : sources) {
    Common one = c;
    one.source = source.ToString();
    int ignored = 0;
    auto transport = MakeTransport(one, &ignored);
    if (transport == nullptr) return ignored;
    auto response = transport->Request(seedd::Json{{"kind", "weight_shards"}, {"model", model}});
    if (!response.has_value()) continue;
    if ((*response)["status"] == "miss") {
      code = kExitMiss;
      continue;
    }
    if ((*response)["status"] != "ok") {
      std::fprintf(stderr, "seedctl: %s: %s\n", one.source.c_str(),
                   seedd::DumpJson(*response).c_str());
      code = kExitError;
      continue;
    }
    auto parsed = seedd::ParseManifest((*response)["payload"]);
    if (!parsed.ok()) {
      std::fprintf(stderr, "seedctl: %s sent a bad manifest: %s\n", one.source.c_str(),
                   parsed.status().message().c_str());
      code = kExitError;
      continue;
    }
    manifest = std::move(*parsed);
    break;
  }
  if (!manifest.has_value()) {
    if (code == kExitMiss)
      std::fprintf(stderr, "seedctl: no source serves model '%s'\n", model.c_str());
    return code;
  }
  // The relays the manifest lists (and any learnt on the way) are preferred
  // for the chunks they have; the sources given here are the seeds.
  seedd::FetchOptions options;
  options.token = *token;
  options.connections_per_source = connections;
  options.verify_sha256 = verify == "sha256";
  const auto start = std::chrono::steady_clock::now();
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::mutex progress_mu;
  auto last = start;
  seedd::FetchStats stats;
  if (tty) {
    options.progress = [&](uint64_t done) {
      std::lock_guard<std::mutex> lock(progress_mu);
      auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(100) && done < manifest->total_size) return;
      last = now;
      double secs = std::chrono::duration<double>(now - start).count();
      double rate = secs > 0 ? done / secs : 0;
      double eta = rate > 0 ? (manifest->total_size - done) / rate : 0;
      std::fprintf(stderr, "\r%6.1f%%  %.1f / %.1f MiB  %.1f MB/s  ETA %.0f s  %zu source(s)   ",
                   100.0 * done / std::max<uint64_t>(1, manifest->total_size), done / 1048576.0,
                   manifest->total_size / 1048576.0, rate / 1e6, eta,
                   sources.size() + stats.peers.size());  // stats: guarded while called
    };
  }
  // Ctrl-C (or SIGTERM) stops the pull; what is verified is kept for a rerun.
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  options.cancel = cancel;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the fetch starts its threads
  std::thread waiter([&stop, cancel] {
    int sig = 0;
    sigwait(&stop, &sig);
    if (sig != 0) cancel->store(true);
  });
  seedd::Status st = seedd::FetchModel(*manifest, sources, into, options, &stats);
  if (!cancel->load()) pthread_kill(waiter.native_handle(), SIGTERM);  // done: end the waiter
  waiter.join();
  if (tty) std::fprintf(stderr, "\n");
  if (st.code() == seedd::StatusCode::kCancelled) {
    std::fprintf(stderr, "seedctl: stopped: %s; rerun the same command to resume\n",
                 st.message().c_str());
    return kExitInterrupted;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "seedctl: %s\n", st.message().c_str());
    return kExitError;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "pulled %s (%zu files, %.1f MiB) from %zu source(s) and %zu relay(s) into %s in %.2f s "
      "(%.1f MB/s); %.1f MiB from relays, %llu chunk(s) resumed, %llu refetched, %llu hole(s)\n",
      model.c_str(), manifest->files.size(), manifest->total_size / 1048576.0, sources.size(),
      stats.peers.size(), into.c_str(), secs, manifest->total_size / 1e6 / std::max(secs, 1e-9),
      stats.bytes_from_peers / 1048576.0, static_cast<unsigned long long>(stats.chunks_resumed),
      static_cast<unsigned long long>(stats.chunks_rejected),
      static_cast<unsigned long long>(stats.chunks_holes));
  return kExitOk;
}

int RunStore(const std::string& op, const std::string& url, const std::string& key_text,
             const std::string& file) {
  auto store = seedd::OpenArtifactStore(url);
  if (!store.ok()) return Fail(store.status().message());
  if (op == "ls") {
    auto keys = (*store)->List(key_text);
    if (!keys.ok()) {
      std::fprintf(stderr, "seedctl: %s\n", keys.status().message().c_str());
      return kExitError;
    }
    for (const auto& k : *keys) std::printf("%s\n", k.c_str());
    return kExitOk;
  }
  auto key = seedd::ArtifactKey::Parse(key_text);
  if (!key.ok()) return Fail(key.status().message());
  if (op == "get") {
    auto value = (*store)->Get(*key);
    if (!value.ok()) {
      std::fprintf(stderr, "seedctl: %s\n", value.status().message().c_str());
      return kExitError;
    }
    if (!value->has_value()) {
      std::fprintf(stderr, "seedctl: %s: not found in %s\n", key_text.c_str(),
                   seedd::RedactStoreUrl(url).c_str());
      return kExitMiss;
    }
    if (file.empty() || file == "-") {
      std::fwrite((*value)->data(), 1, (*value)->size(), stdout);
      return std::fflush(stdout) == 0 ? kExitOk : kExitError;
    }
    // Written beside FILE and renamed: FILE is never left partial.
    std::filesystem::path tmp = file + ".seedctl-tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    bool ok =
        f != nullptr && std::fwrite((*value)->data(), 1, (*value)->size(), f) == (*value)->size();
    ok = f != nullptr && std::fclose(f) == 0 && ok;
    std::error_code ec;
    if (ok) std::filesystem::rename(tmp, file, ec);
    if (!ok || ec) {
      std::filesystem::remove(tmp, ec);
      std::fprintf(stderr, "seedctl: cannot write %s\n", file.c_str());
      return kExitError;
    }
    return kExitOk;
  }
  if (op == "put") {
    std::string data;
    std::FILE* f = file.empty() || file == "-" ? stdin : std::fopen(file.c_str(), "rb");
    if (f == nullptr) return Fail("cannot read " + file);
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
    bool read_ok = !std::ferror(f);
    if (f != stdin) std::fclose(f);
    if (!read_ok) return Fail("cannot read " + (file.empty() ? std::string("stdin") : file));
    seedd::Status st = (*store)->Put(*key, data);
    if (!st.ok()) {
      std::fprintf(stderr, "seedctl: %s\n", st.message().c_str());
      return kExitError;
    }
    return kExitOk;
  }
  seedd::Status st = (*store)->Delete(*key);
  if (!st.ok()) {
    std::fprintf(stderr, "seedctl: %s\n", st.message().c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "seedctl: talk to seedd daemons. The shared token comes from --token-file or\n"
      "SEEDD_TOKEN. Exit status: 0 ok, 2 bad usage or no response, 3 miss, 4 error."};
  app.set_version_flag("--version", std::string("seedctl ") + SEEDD_VERSION_STRING);
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  Common req_common;
  std::string kind;
  std::vector<std::string> params;
  std::vector<std::string> json_params;
  CLI::App* request =
      app.add_subcommand("request", "send one request and print the response JSON on stdout");
  AddCommon(request, &req_common);
  request->add_option("--kind", kind, "the seed kind, e.g. artifact")->required();
  request->add_option("--param", params, "KEY=VALUE key field, VALUE sent as a string")->take_all();
  request->add_option("--param-json", json_params, "KEY=JSON key field, JSON parsed")->take_all();

  Common fetch_common;
  std::string ns;
  std::string hash;
  std::string filename;
  std::string cache_dir;
  CLI::App* fetch =
      app.add_subcommand("fetch", "adopt one artifact from a daemon into a local cache directory");
  AddCommon(fetch, &fetch_common);
  fetch->add_option("--namespace", ns, "artifact namespace, [a-z0-9_.-]{1,64}")->required();
  fetch->add_option("--config-hash", hash, "lowercase hex, 16-128 digits")->required();
  fetch->add_option("--filename", filename, "file name, [A-Za-z0-9_.-]{1,255}")->required();
  fetch->add_option("--cache-dir", cache_dir,
                    "local cache directory (default: $XDG_CACHE_HOME/seedd, else ~/.cache/seedd)");

  Common pull_common;
  std::vector<std::string> pull_sources;
  std::string pull_model;
  std::string pull_into;
  int pull_connections = 4;
  std::string pull_verify = "chunks";
  CLI::App* pull = app.add_subcommand(
      "pull",
      "fetch a model's files from seedd daemons into a new directory: verified per "
      "chunk, resumable (rerun after an interruption), from several sources at once");
  pull->add_option("--source", pull_sources, "HOST:PORT of a daemon serving the model (repeatable)")
      ->required()
      ->take_all();
  pull->add_option("--token-file", pull_common.token_file,
                   "file holding the shared token (default: the SEEDD_TOKEN environment variable)");
  pull->add_option("--model", pull_model, "the model's name on the daemons")->required();
  pull->add_option("--into", pull_into, "directory to create; the files end up directly under it")
      ->required();
  pull->add_option("--connections", pull_connections, "data connections per source")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  pull->add_option("--verify", pull_verify,
                   "chunks: XXH3-128 of every chunk (always); sha256: also every file's SHA-256 "
                   "before the files are committed (one more read of the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"chunks", "sha256"}));
  std::string manifest_dir;
  std::string manifest_model;
  uint64_t chunk_mib = 8;
  CLI::App* manifest_cmd = app.add_subcommand(
      "manifest",
      "print the weight_shards manifest of a model directory (files, safetensors "
      "tensors, chunk digests, fingerprint, root digest)");
  manifest_cmd
      ->add_option("dir", manifest_dir,
                   "the model directory, or hf:ORG/NAME[@REVISION] for a model in the Hugging "
                   "Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)")
      ->required();
  manifest_cmd->add_option("--model", manifest_model, "model name (default: the directory's name)");
  manifest_cmd->add_option("--chunk-mib", chunk_mib, "chunk size in MiB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1024}));
  CLI::App* store_cmd = app.add_subcommand(
      "store", "operate on a shared store directly: get, put, ls, rm (exit 3 when get misses)");
  store_cmd->require_subcommand(1);
  struct StoreArgs {
    std::string url, key, file;
  };
  std::map<std::string, StoreArgs> store_args;
  std::map<std::string, CLI::App*> store_ops;
  for (auto [op, help] : std::vector<std::pair<std::string, std::string>>{
           {"get", "write KEY's value to FILE (atomically) or stdout"},
           {"put", "store FILE's bytes (or stdin) under KEY"},
           {"ls", "list the keys that start with PREFIX (all keys without one)"},
           {"rm", "remove KEY"}}) {
    CLI::App* sub = store_cmd->add_subcommand(op, help);
    StoreArgs& a = store_args[op];
    sub->add_option("--store", a.url,
                    "store URL: file:///mount, redis://HOST:PORT[/DB][?prefix=P], "
                    "s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT&region=R")
        ->required();
    if (op == "ls") {
      sub->add_option("prefix", a.key, "key prefix, e.g. triton/ (default: every key)");
    } else {
      sub->add_option("key", a.key, "KIND/CONFIG_HASH/FILENAME")->required();
    }
    if (op == "get" || op == "put") sub->add_option("file", a.file, "file (default: stdout/stdin)");
    store_ops[op] = sub;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(e.what());
  }
  if (!seedd::SetLogLevel(log_level)) return Fail("unknown --log-level '" + log_level + "'");
  if (request->parsed()) return RunRequest(req_common, kind, params, json_params);
  if (fetch->parsed()) return RunFetch(fetch_common, ns, hash, filename, cache_dir);
  if (manifest_cmd->parsed()) return RunManifest(manifest_dir, manifest_model, chunk_mib);
  if (pull->parsed())
    return RunPull(pull_common, pull_sources, pull_model, pull_into, pull_connections, pull_verify);
  for (const auto& [op, sub] : store_ops) {
    if (sub->parsed()) {
      const StoreArgs& a = store_args[op];
      return RunStore(op, a.url, a.key, a.file);
    }
  }
  return Fail("no subcommand");
}
