// seedctl: the operator's tool. Sends one request to a daemon, pulls a model,
// adopts one artifact, or works on a cache or a shared store directly.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>

#include "cli_chunk.h"
#include "cli_suggest.h"
#include "seedctl.h"
#include "seedd/logging.h"
#include "seedd/origins.h"
#include "seedd_version.h"

namespace {

void AddConnection(CLI::App* cmd, seedctl::Connection* c) {
  cmd->add_option("--source", c->source, "HOST:PORT or [V6ADDR]:PORT of the daemon")->required();
  cmd->add_option("--token-file", c->token_file,
                  "path of a file holding the shared token (default: the SEEDD_TOKEN "
                  "environment variable, which holds the token itself, not a path)");
  cmd->add_option("--timeout", c->timeout_s,
                  "seconds to wait for the response to begin (a wrong port is named then)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  using seedctl::Fail;
  CLI::App app{
      "seedctl: talk to seedd daemons and work on their caches and stores. The shared\n"
      "token comes from --token-file or SEEDD_TOKEN. Exit status: 0 ok, 2 bad usage or\n"
      "no response, 3 miss, 4 error, 130 stopped (a rerun of a pull resumes)."};
  app.set_version_flag("--version", std::string("seedctl ") + SEEDD_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // --log-level also after the subcommand
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  seedd::TlsOptions tls;
  app.add_option("--tls-ca", tls.ca,
                 "PEM CA bundle: talk to the daemon over TLS 1.3, its certificate verified "
                 "against this CA and the host name (or --tls-server-name)");
  app.add_option("--tls-cert", tls.cert,
                 "PEM client certificate, for daemons that require one (seedd "
                 "--tls-client-auth); with --tls-key and --tls-ca");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-server-name", tls.server_name,
                 "the name the daemon's certificate must carry (default: the --source host)");

  seedctl::Connection req_conn;
  std::string kind;
  std::vector<std::string> params;
  std::vector<std::string> json_params;
  CLI::App* request =
      app.add_subcommand("request", "send one request and print the response JSON on stdout");
  AddConnection(request, &req_conn);
  request->add_option("--kind", kind, "the seed kind, e.g. artifact")->required();
  request->add_option("--param", params, "KEY=VALUE key field, VALUE sent as a string")->take_all();
  request->add_option("--param-json", json_params, "KEY=JSON key field, JSON parsed")->take_all();

  seedctl::Connection fetch_conn;
  std::string ns;
  std::string hash;
  std::string filename;
  std::string cache_dir;
  std::string fetch_kind = "artifact";
  seedctl::CompileFetchArgs compile;
  CLI::App* fetch = app.add_subcommand(
      "fetch", "adopt one artifact, or one compile cache (--kind compile_cache), from a daemon");
  AddConnection(fetch, &fetch_conn);
  fetch->add_option("--kind", fetch_kind, "artifact, or compile_cache (a whole cache directory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"artifact", "compile_cache"}));
  fetch
      ->add_option("--namespace", ns,
                   "artifact namespace, or the compile cache's name, [a-z0-9_.-]{1,64}")
      ->required();
  fetch->add_option("--config-hash", hash, "artifact: lowercase hex, 16-128 digits");
  fetch->add_option("--filename", filename, "artifact: file name, [A-Za-z0-9_.-]{1,255}");
  fetch->add_option("--cache-dir", cache_dir,
                    "artifact: local cache directory (default: $XDG_CACHE_HOME/seedd, else "
                    "~/.cache/seedd)");
  fetch->add_option("--key", compile.key,
                    "compile_cache: the configuration it was built for, 16-128 lowercase hex");
  fetch->add_option("--dir", compile.dir,
                    "compile_cache: the directory to install into (files there as new or newer "
                    "are kept)");
  fetch
      ->add_option("--factor", compile.factors,
                   "compile_cache: NAME=VALUE, repeatable: this host's key factors; a bundle "
                   "built under others is rejected")
      ->take_all();
  fetch->add_option("--factors-file", compile.factors_file,
                    "compile_cache: a JSON object of this host's key factors");
  fetch
      ->add_option("--param", compile.params,
                   "compile_cache: factor.NAME=VALUE (as --factor NAME=VALUE), namespace=NAME "
                   "or key=HEX, repeatable")
      ->take_all();
  fetch
      ->add_option("--trust-key", compile.trust_keys,
                   "compile_cache: PEM Ed25519 public key (repeatable): install only a bundle "
                   "signed by one of them (the publishing daemon's --sign-key)")
      ->check(CLI::ExistingFile);

  seedctl::Connection ls_conn;
  std::string ls_prefix;
  CLI::App* ls = app.add_subcommand(
      "ls",
      "list what a daemon serves: its models (name, root digest, size, files) and the "
      "keys of its artifact cache");
  AddConnection(ls, &ls_conn);
  ls->add_option("--prefix", ls_prefix,
                 "only artifact keys that start with this, e.g. triton/ (default: all, up to "
                 "10000)");

  seedctl::PullArgs pull_args;
  CLI::App* pull = app.add_subcommand(
      "pull",
      "fetch a model's files into a directory: from seedd daemons (--source, --model; "
      "verified per chunk, resumable after an interruption, from several sources at once) or "
      "from where it lives (seedctl pull oci://...|s3://... --into DIR; every file checked "
      "against its upstream digest)");
  CLI::Option* pull_source =
      pull->add_option("--source", pull_args.sources,
                       "HOST:PORT of a daemon serving the model (repeatable)")
          ->take_all();
  pull->add_option("--token-file", pull_args.token_file,
                   "path of a file holding the shared token (default: the SEEDD_TOKEN "
                   "environment variable, which holds the token itself, not a path)");
  CLI::Option* pull_model =
      pull->add_option("--model", pull_args.model, "the model's name on the daemons");
  CLI::Option* pull_from = pull->add_option(
      "--from", pull_args.from,
      "instead of --source and --model: fetch the model from where it lives, "
      "oci://REGISTRY/REPOSITORY:TAG|@sha256:DIGEST (a ModelPack or an artifact of titled "
      "layers) or s3://BUCKET/PREFIX?endpoint=...&region=..., every file checked against its "
      "upstream digest; no daemon needed");
  pull_from->excludes(pull_source)->excludes(pull_model);
  // `seedctl pull URL --into DIR`, as `seedctl push URL --from DIR` writes it.
  std::string pull_url;
  pull->add_option("url", pull_url, "the same as --from URL (oci://... or s3://...)")
      ->excludes(pull_from)
      ->excludes(pull_source)
      ->excludes(pull_model);
  pull->add_option("--origin-auth", pull_args.origin_auth,
                   "with --from oci:// or --verify upstream=oci://: registry credentials, a file "
                   "as `docker login` writes it")
      ->check(CLI::ExistingFile);
  pull->add_option("--origin-range-mib", pull_args.origin_range_mib,
                   "with --from: files larger than this many MiB are fetched as ranged GETs of "
                   "this size, 4 at once, and checked whole; 0: one GET per file")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1048576.0));
  pull->add_option("--origin-ca", pull_args.origin_ca,
                   "with --from or --verify upstream=: PEM CA bundle trusted for an https "
                   "registry or endpoint")
      ->check(CLI::ExistingFile);
  pull->add_option("--into", pull_args.into,
                   "the directory the files end up directly under: a new one, an empty one (a "
                   "volume's mount point), or one holding this version already (nothing moves)")
      ->required();
  pull->add_flag("--replace", pull_args.replace,
                 "--into may hold other files: the new model replaces them (a directory is "
                 "swapped atomically; a mount point's entries are replaced one by one; chunks it "
                 "holds already are copied, not fetched)");
  pull->add_option("--reuse-from", pull_args.reuse_from,
                   "a directory laid out as the model (an earlier version of it): chunks it holds "
                   "at the same path and offset, checked against the new manifest, are copied "
                   "from there instead of fetched (repeatable); from an upstream, whole files at "
                   "the same path that match its digests (and with --replace, --into's own)");
  pull->add_option("--order", pull_args.order,
                   "index: files complete one after another in the model's order (paths "
                   "sorted: a sharded checkpoint's shards as its index numbers them) when "
                   "pulling from the sources alone and near the end of a swarm pull, and each "
                   "is reported as soon as it is whole and verified ('ready PATH', or a "
                   "file_ready event with --progress json), for a loader that reads files as "
                   "they land (until the pull commits they are under its staging directory)")
      ->check(CLI::IsMember({"index"}));
  pull->add_option("--connections", pull_args.connections, "data connections per source")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  pull->add_option("--max-neighbours", pull_args.max_neighbours,
                   "peers fetched from at once (sources and relays named by them)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  pull->add_option("--verify", pull_args.verify,
                   "chunks: every chunk's digest, as the manifest names it (always); sha256: "
                   "also every file's SHA-256 "
                   "before the files are committed (one more read of the model); "
                   "upstream=oci://REGISTRY/REPOSITORY:TAG|@sha256:DIGEST: the model's upstream "
                   "vouches for it: the manifest must name exactly the upstream's files, each "
                   "with its layer's SHA-256 (checked before any byte moves), and every file's "
                   "SHA-256 is checked before commit; with @sha256: the model is pinned from the "
                   "registry to --into, whichever daemons send it (--origin-auth, --origin-ca); "
                   "upstream=s3://BUCKET/PREFIX?...: the bucket's listing vouches: its objects and "
                   "sizes before any byte moves, each file's MD5 (its ETag) before commit")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        if (v == "chunks" || v == "sha256") return "";
        if (v.rfind("upstream=", 0) == 0) {
          seedd::Status st = seedd::CheckOriginUrl(v.substr(9));
          return st.ok() ? "" : st.message();
        }
        return "chunks, sha256 or upstream=URL, not '" + v + "'";
      });
  pull->add_option("--root-digest", pull_args.root_digest,
                   "pin the version: refuse any manifest whose root digest is not this one "
                   "(64 hex digits, as `seedctl manifest` prints it); nothing is fetched then");
  pull->add_option("--trust-key", pull_args.trust_keys,
                   "PEM Ed25519 public key (repeatable): pull only a manifest signed by one of "
                   "them (the publishing daemon's --sign-key); anything else is refused before "
                   "a byte moves, the signer's fingerprint in the error")
      ->check(CLI::ExistingFile);
  pull->add_option("--timeout,--wait", pull_args.timeout_s,
                   "seconds to keep retrying while no source answers or every source failed "
                   "mid-pull; each retry resumes. Short by default so that a wrong address "
                   "fails fast; give scripts whose sources start later more (--wait 1800)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 7.0 * 86400));
  pull->add_option("--progress", pull_args.progress,
                   "auto: a bar on a terminal, else a line every 5 s on stderr; bar; lines; "
                   "json: one JSON object per line on stdout (progress, retry, then done or "
                   "error) instead of the summary; none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "json", "none"}));

  std::string push_url;
  std::string push_from;
  std::string push_auth;
  std::string push_ca;
  uint64_t push_part_mib = 0;
  CLI::App* push = app.add_subcommand(
      "push",
      "write a model directory to an OCI registry as a ModelPack artifact (one raw layer per "
      "file, its path in org.cncf.model.filepath): what `seedd --model NAME=oci://...` and "
      "modctl read; layers the repository holds already are not sent again. Or to S3: one "
      "object per file below the prefix, each with its x-amz-checksum-sha256");
  push->add_option("url", push_url,
                   "oci://REGISTRY[:PORT]/REPOSITORY:TAG (?plain-http=true for "
                   "an HTTP registry that is not on the loopback), or "
                   "s3://BUCKET/PREFIX?endpoint=...&region=... (AWS credentials as for the S3 "
                   "store; one PUT per file of up to 5 GiB, a multipart upload for larger ones)")
      ->required();
  push->add_option("--from", push_from,
                   "the model directory, or hf:ORG/NAME[@REVISION] for a snapshot in the Hugging "
                   "Face cache")
      ->required();
  push->add_option("--origin-auth", push_auth,
                   "registry credentials: a file as `docker login`, `podman login` or `skopeo "
                   "login` writes it ({\"auths\": {\"HOST:PORT\": {\"auth\": base64 of "
                   "user:password}}})")
      ->check(CLI::ExistingFile);
  push->add_option("--origin-ca", push_ca, "PEM CA bundle trusted for an https registry")
      ->check(CLI::ExistingFile);
  push->add_option("--part-mib", push_part_mib,
                   "s3:// only: files larger than this go up as multipart uploads in parts of "
                   "this size (5 to 5120; default: files over 5 GiB, in parts of 512 MiB); each "
                   "part carries its SHA-256 checksum and the object the file's SHA-256 "
                   "(x-amz-meta-sha256), which readers verify against")
      ->check(CLI::Range(5, 5120));

  std::string manifest_dir;
  std::string manifest_model;
  std::string chunk_mib = "auto";
  std::string manifest_digest = "sha256";
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
  manifest_cmd
      ->add_option("--chunk-mib", chunk_mib,
                   "chunk size in MiB (fractions go by 64 KiB: 0.25 = 256 KiB), or auto: as "
                   "seedd --chunk-mib, about 1,024 chunks per model")
      ->capture_default_str()
      ->check(seedd::ChunkMibValidator());
  manifest_cmd
      ->add_option("--chunk-digest", manifest_digest,
                   "digest of each chunk: sha256 or xxh3 (as seedd --chunk-digest; the root "
                   "digest differs between them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"xxh3", "sha256"}));

  std::string manifest_sign_key;
  manifest_cmd
      ->add_option("--sign-key", manifest_sign_key,
                   "PEM Ed25519 private key: sign the manifest (its root digest), as "
                   "seedd --sign-key does")
      ->check(CLI::ExistingFile);

  std::vector<std::string> key_files;
  CLI::App* key_cmd =
      app.add_subcommand("key",
                         "Ed25519 keys for --sign-key and --trust-key (make one with: "
                         "openssl genpkey -algorithm ed25519 -out sign.pem; its public "
                         "half: openssl pkey -in sign.pem -pubout -out trust.pem)");
  key_cmd->require_subcommand(1);
  CLI::App* key_fp = key_cmd->add_subcommand(
      "fingerprint", "print each key's fingerprint, as signatures and errors name keys");
  key_fp->add_option("file", key_files, "PEM key files (public or private)")->required();

  std::string status_admin;
  bool status_json = false;
  double status_timeout = 10;
  CLI::App* status_cmd = app.add_subcommand(
      "status",
      "print what a daemon is doing, from its admin endpoint (seedd --admin-listen): models "
      "served, pulls with their progress and rate, warmups, stores");
  std::string status_registry;
  bool status_fleet = false;
  status_cmd->add_option("--admin", status_admin, "HOST:PORT of the daemon's --admin-listen");
  status_cmd->add_flag("--fleet", status_fleet,
                       "the whole fleet instead, from its registry (--registry): every live "
                       "daemon with its zone, the model versions it holds and its pulls with "
                       "their progress");
  status_cmd->add_option("--registry", status_registry,
                         "with --fleet: the redis:// URL the daemons were given as --registry");
  status_cmd->add_flag("--json", status_json, "print the JSON as served (for scripts)");
  status_cmd->add_option("--timeout", status_timeout, "seconds to wait for the answer")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));

  std::string preheat_model, preheat_registry, preheat_zone;
  uint64_t preheat_count = 0;
  double preheat_percent = 0, preheat_wait = 0, preheat_ttl = 3600;
  CLI::App* preheat = app.add_subcommand(
      "preheat",
      "ask the fleet's daemons, through their registry, to pull a model now (before a "
      "rollout): --count N of them, --percent P of the live ones, or every daemon of --zone Z "
      "(with --count or --percent: that many of the zone's); each chosen daemon pulls it from "
      "its sources, and `seedctl status --fleet` shows who holds it");
  preheat->add_option("model", preheat_model, "MODEL, or MODEL@ROOT_DIGEST for that version only")
      ->required();
  preheat
      ->add_option("--registry", preheat_registry,
                   "the redis:// URL the daemons were given as --registry")
      ->required();
  auto* pc = preheat->add_option("--count", preheat_count, "how many daemons pull it");
  auto* pp = preheat
                 ->add_option("--percent", preheat_percent,
                              "the share of the live daemons that pull it (rounded up)")
                 ->check(CLI::Range(0.0, 100.0));
  pc->excludes(pp);
  preheat->add_option("--zone", preheat_zone, "only daemons of this --zone");
  preheat
      ->add_option("--wait", preheat_wait,
                   "seconds to wait until the chosen daemons hold it complete, showing their "
                   "progress (0: return once asked)")
      ->capture_default_str();
  preheat
      ->add_option("--ttl", preheat_ttl,
                   "seconds the request stays in the registry for daemons that start later")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 30.0 * 24 * 3600));

  std::string gc_cache_dir;
  int gc_keep = 2;
  bool gc_dry_run = false;
  CLI::App* gc = app.add_subcommand(
      "gc",
      "remove what a daemon's cache no longer needs: abandoned pulls (staging directories "
      "no daemon is filling) and model versions beyond the newest --keep-versions, never "
      "the one a model's current link names");
  gc->add_option("--cache-dir", gc_cache_dir,
                 "the daemon's --cache-dir (default: $XDG_CACHE_HOME/seedd, else ~/.cache/seedd)");
  gc->add_option("--keep-versions", gc_keep, "model versions to keep per name, current included")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  gc->add_flag("--dry-run", gc_dry_run, "print what would be removed, remove nothing");

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
           {"put", "store FILE's bytes (or stdin) under KEY (a key a daemon would serve)"},
           {"ls", "list the keys that start with PREFIX (all keys without one)"},
           {"rm", "remove KEY"}}) {
    CLI::App* sub = store_cmd->add_subcommand(op, help);
    StoreArgs& a = store_args[op];
    sub->add_option("--store", a.url,
                    "store URL: file:///mount, redis://HOST:PORT[/DB][?prefix=P], "
                    "s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT&region=R (quote a URL "
                    "with '?' or '&' in the shell)")
        ->required();
    if (op == "ls") {
      sub->add_option("prefix", a.key, "key prefix, e.g. triton/ (default: every key)");
    } else {
      sub->add_option("key", a.key,
                      "KIND/CONFIG_HASH/FILENAME: KIND [a-z0-9_.-]{1,64}, CONFIG_HASH 16-128 "
                      "lowercase hex digits, FILENAME [A-Za-z0-9_.-]{1,255}")
          ->required();
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
    return Fail(seedd::ExplainParseError(app, e, argc, argv) + "; see --help");
  }
  seedd::SetLogProgram("seedctl");
  if (!seedd::SetLogLevel(log_level)) return Fail("unknown --log-level '" + log_level + "'");
  if (!tls.cert.empty() || !tls.key.empty() || !tls.ca.empty() || !tls.server_name.empty()) {
    if (tls.ca.empty()) return Fail("--tls-cert, --tls-key and --tls-server-name need --tls-ca");
    auto ctx = seedd::TlsContext::Create(tls);
    if (!ctx.ok()) return Fail(ctx.status().message());
    seedctl::SetTls(std::move(*ctx));
  }
  if (request->parsed()) return seedctl::RunRequest(req_conn, kind, params, json_params);
  if (fetch->parsed() && fetch_kind == "compile_cache") {
    compile.ns = ns;
    return seedctl::RunFetchCompileCache(fetch_conn, compile);
  }
  if (fetch->parsed()) {
    if (hash.empty() || filename.empty()) {
      std::fprintf(stderr, "seedctl fetch: an artifact needs --config-hash and --filename\n");
      return 2;
    }
    return seedctl::RunFetch(fetch_conn, ns, hash, filename, cache_dir);
  }
  if (ls->parsed()) return seedctl::RunList(ls_conn, ls_prefix);
  if (manifest_cmd->parsed())
    return seedctl::RunManifest(manifest_dir, manifest_model, seedd::ChunkBytesOfFlag(chunk_mib),
                                manifest_digest, manifest_sign_key);
  if (key_fp->parsed()) return seedctl::RunKeyFingerprint(key_files);
  if (pull->parsed()) {
    if (!pull_url.empty() && !seedd::IsOriginUrl(pull_url)) {
      std::fprintf(stderr,
                   "seedctl pull: %s is not a model's upstream (oci://REGISTRY/REPOSITORY:TAG or "
                   "s3://BUCKET/PREFIX); to pull a model that daemons serve, name them: --source "
                   "HOST:PORT --model %s\n",
                   pull_url.c_str(), pull_url.c_str());
      return 2;
    }
    if (!pull_url.empty()) pull_args.from = pull_url;
    if (!pull_args.from.empty()) return seedctl::RunOriginPull(pull_args);
    if (pull_args.sources.empty() || pull_args.model.empty()) {
      std::fprintf(stderr,
                   "seedctl pull: name the daemons and the model (--source HOST:PORT --model "
                   "NAME), or where the model lives (--from oci://... or s3://...)\n");
      return 2;
    }
    return seedctl::RunPull(pull_args);
  }
  if (push->parsed()) {
    seedd::OriginAccess access;
    access.auth_file = push_auth;
    access.ca_file = push_ca;
    if (push_part_mib != 0) {
      if (push_url.rfind("s3://", 0) != 0) {
        std::fprintf(stderr, "seedctl push: --part-mib is for s3:// pushes\n");
        return 2;
      }
      access.push_part_bytes = push_part_mib << 20;
    }
    return seedctl::RunPush(push_url, push_from, access);
  }
  if (gc->parsed()) return seedctl::RunGc(gc_cache_dir, gc_keep, gc_dry_run);
  if (status_cmd->parsed()) {
    if (status_fleet) {
      if (status_registry.empty()) return Fail("status --fleet needs --registry redis://...");
      return seedctl::RunFleetStatus(status_registry, status_json);
    }
    if (status_admin.empty()) {
      return Fail(
          "status needs --admin HOST:PORT (a daemon's --admin-listen), or --fleet "
          "--registry URL");
    }
    return seedctl::RunStatus(status_admin, status_json, status_timeout);
  }
  if (preheat->parsed()) {
    seedd::PreheatRequest r;
    const size_t at = preheat_model.find('@');
    r.model = preheat_model.substr(0, at);
    if (at != std::string::npos) r.root_digest = preheat_model.substr(at + 1);
    r.count = preheat_count;
    r.percent = preheat_percent;
    r.zone = preheat_zone;
    r.ttl = std::chrono::seconds(static_cast<int64_t>(preheat_ttl));
    return seedctl::RunPreheat(preheat_registry, r, preheat_wait);
  }
  for (const auto& [op, sub] : store_ops) {
    if (sub->parsed()) {
      const StoreArgs& a = store_args[op];
      return seedctl::RunStore(op, a.url, a.key, a.file);
    }
  }
  return Fail("no subcommand");
}
