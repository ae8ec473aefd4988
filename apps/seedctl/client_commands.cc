// seedctl's one-request subcommands: request, fetch, ls.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "seedctl.h"
#include "seedd/artifact_kind.h"
#include "seedd/catalog.h"
#include "seedd/client.h"
#include "seedd/compile_cache.h"
#include "seedd/daemon.h"
#include "seedd/seed_transport.h"
#include "seedd/units.h"
#include "seedd/weights.h"

namespace seedctl {

namespace {

// The whole response may take this long once it has begun (a large artifact).
constexpr std::chrono::milliseconds kResponseTimeout{300000};

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The response to `request` from c.source, or the exit status after saying why.
seedd::Result<seedd::Json> Ask(const Connection& c, seedd::Json request, int* code) {
  *code = kExitUsage;
  auto source = seedd::ParseHostPort(c.source);
  if (!source.ok()) return source.status().WithContext("--source");
  auto token = ReadToken(c.token_file);
  if (!token.ok()) return token.status();
  return Exchange(*source, *token, std::move(request), Millis(c.timeout_s));
}

std::string StatusOf(const seedd::Json& response) {
  auto it = response.find("status");
  if (it == response.end()) return "none";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "seedctl: %s\n", message.c_str());
  return code;
}

seedd::Result<std::string> ReadToken(const std::string& token_file) {
  std::optional<std::filesystem::path> path;
  if (!token_file.empty()) path = token_file;
  auto token = seedd::LoadToken(path);
  if (!token.ok()) return token.status();
  if (token->empty()) {
    return seedd::Status::InvalidArgument(
        "no token: pass --token-file FILE (a file holding the token) or set SEEDD_TOKEN to the "
        "token itself");
  }
  return token;
}

namespace {
std::shared_ptr<seedd::TlsContext> g_tls;
}  // namespace

void SetTls(std::shared_ptr<seedd::TlsContext> tls) { g_tls = std::move(tls); }
const std::shared_ptr<seedd::TlsContext>& Tls() { return g_tls; }

seedd::Result<seedd::Json> Exchange(const seedd::HostPort& source, const std::string& token,
                                    seedd::Json request, std::chrono::milliseconds first_byte) {
  request["token"] = token;
  seedd::ExchangeOptions options;
  options.tls = g_tls;
  options.response_timeout = std::max(kResponseTimeout, first_byte);
  options.first_byte_timeout = first_byte;
  options.max_response_bytes = seedd::kMaxResponseBytes;
  seedd::Result<seedd::Json> response = seedd::ExchangeJson(source, request, options);
  if (!response.ok()) return response.status().WithContext(source.ToString());
  if (!response->is_object()) {
    return seedd::Status::DataLoss(source.ToString() + " sent a response that is not an object");
  }
  return response;
}

int RunRequest(const Connection& c, const std::string& kind, const std::vector<std::string>& params,
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
  auto response = Ask(c, std::move(request), &code);
  if (!response.ok()) return Fail(response.status().message(), code);
  std::printf("%s\n", seedd::DumpJson(*response).c_str());
  const std::string status = StatusOf(*response);
  if (status == "ok") return kExitOk;
  if (status == "miss") return kExitMiss;
  return kExitError;
}

int RunFetch(const Connection& c, const std::string& ns, const std::string& hash,
             const std::string& filename, const std::string& cache_dir) {
  seedd::Json ctx = {{"namespace", ns}, {"config_hash", hash}, {"filename", filename}};
  auto key = seedd::ArtifactKeyFromFields(ctx);
  if (!key.ok()) return Fail(ExplainKeyError(key.status().message()));
  std::filesystem::path dir =
      cache_dir.empty() ? seedd::DefaultCacheDir() : std::filesystem::path(cache_dir);
  auto seedable = seedd::NewArtifactSeedable(dir);
  seedd::Result<seedd::Json> params = seedable->RequestParams(ctx);
  if (!params.ok()) return Fail(params.status().message());
  seedd::Json request = seedd::Json::object();
  request["kind"] = std::string(seedable->kind());
  request.update(*params);
  const auto start = std::chrono::steady_clock::now();
  int code = 0;
  auto response = Ask(c, std::move(request), &code);
  if (!response.ok()) return Fail(response.status().message(), code);
  const std::string status = StatusOf(*response);
  if (status == "miss") {
    return Fail(key->ToString() + ": not found on " + c.source, kExitMiss);
  }
  if (status != "ok") {
    return Fail(c.source + " answered: " + seedd::ExplainSourceError(*response), kExitError);
  }
  static const seedd::Json kNull;
  auto payload = response->find("payload");
  seedd::Result<seedd::Json> valid =
      seedable->ValidatePayload(payload == response->end() ? kNull : *payload);
  seedd::Status installed = valid.ok() ? seedable->Install(ctx, *valid) : valid.status();
  if (!installed.ok()) {
    return Fail("rejected what " + c.source + " sent: " + installed.message(), kExitError);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::filesystem::path path = dir / ns / hash / filename;
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  std::printf("fetched %s (%llu bytes) from %s in %.1f ms into %s\n", key->ToString().c_str(),
              static_cast<unsigned long long>(ec ? 0 : size), c.source.c_str(), ms, path.c_str());
  return kExitOk;
}

namespace {

// A bundle's content, pulled from the daemon that sent the bundle into a
// staging directory inside the target (never bundled; a rerun resumes there).
class PullPlane final : public seedd::CompileCacheDataPlane {
 public:
  PullPlane(const Connection& c, std::filesystem::path dir) : c_(c), dir_(std::move(dir)) {}
  seedd::Result<std::string> Serve(const std::string&, const std::filesystem::path&,
                                   const std::vector<std::string>&,
                                   std::map<std::string, std::string>*) override {
    return seedd::Status::FailedPrecondition("seedctl serves nothing");
  }
  seedd::Result<std::filesystem::path> Fetch(const std::string& model,
                                             const std::string& root_digest) override {
    seedd::Result<std::string> token = ReadToken(c_.token_file);
    if (!token.ok()) return token.status();
    seedd::PullOptions options;
    options.sources = {c_.source};
    options.token = *token;
    options.root_digest = root_digest;
    options.timeout = std::chrono::seconds(60);
    staging_ = dir_ / (".seedd-incoming-pull-" + root_digest.substr(0, 16));
    const std::filesystem::path into = staging_ / "content";
    std::fprintf(stderr, "seedctl: pulling the cache's files on the data plane (model %s)\n",
                 model.c_str());
    seedd::Result<seedd::PullResult> pulled = seedd::PullModel(model, into, options);
    if (!pulled.ok()) return pulled.status().WithContext("pulling " + model);
    return into;
  }
  // Removes what Fetch pulled (after it was installed).
  void Discard() {
    std::error_code ec;
    if (!staging_.empty()) std::filesystem::remove_all(staging_, ec);
  }

 private:
  const Connection& c_;
  const std::filesystem::path dir_;
  std::filesystem::path staging_;
};

}  // namespace

int RunFetchCompileCache(const Connection& c, const CompileFetchArgs& given) {
  CompileFetchArgs args = given;
  for (const std::string& p : given.params) {
    const size_t eq = p.find('=');
    const std::string name = p.substr(0, eq);
    if (eq == std::string::npos) return Fail("--param " + p + ": expected NAME=VALUE", 2);
    if (name.rfind("factor.", 0) == 0) {
      args.factors.push_back(name.substr(7) + p.substr(eq));
    } else if (name == "namespace") {
      args.ns = p.substr(eq + 1);
    } else if (name == "key") {
      args.key = p.substr(eq + 1);
    } else {
      return Fail("--param " + p +
                      ": a compile cache takes factor.NAME=VALUE, namespace=NAME "
                      "and key=HEX",
                  2);
    }
  }
  if (args.key.empty() || args.dir.empty()) {
    return Fail("a compile cache needs --key (16-128 lowercase hex) and --dir (where it goes)", 2);
  }
  seedd::Json key = {{"namespace", args.ns}, {"key", args.key}};
  seedd::Status valid_key = seedd::ValidateCompileCacheKey(key);
  if (!valid_key.ok()) return Fail(std::string(valid_key.message()), 2);
  seedd::Result<seedd::CompileFactors> factors =
      seedd::ParseCompileFactors(args.factors, args.factors_file);
  if (!factors.ok()) return Fail(std::string(factors.status().message()), 2);
  std::shared_ptr<const seedd::TrustedKeys> trust;
  if (!args.trust_keys.empty()) {
    auto keys = seedd::TrustedKeys::Load({args.trust_keys.begin(), args.trust_keys.end()});
    if (!keys.ok()) return Fail("--trust-key: " + keys.status().message(), 2);
    trust = std::move(*keys);
  }
  const auto start = std::chrono::steady_clock::now();
  int code = 0;
  seedd::Json request = {{"kind", std::string(seedd::kCompileCacheKind)}};
  request.update(key);
  auto response = Ask(c, std::move(request), &code);
  if (!response.ok()) return Fail(response.status().message(), code);
  const std::string status = StatusOf(*response);
  if (status == "miss") {
    return Fail("compile cache " + args.ns + "/" + args.key + ": not found on " + c.source,
                kExitMiss);
  }
  if (status != "ok") {
    return Fail(c.source + " answered: " + seedd::ExplainSourceError(*response), kExitError);
  }
  static const seedd::Json kNull;
  auto payload = response->find("payload");
  seedd::Result<seedd::Json> bundle = seedd::ValidateCompileCacheBundle(
      payload == response->end() ? kNull : *payload, args.ns, args.key, *factors,
      seedd::kMaxCompileCacheBytes, trust.get());
  if (!bundle.ok()) {
    return Fail("rejected what " + c.source + " sent: " + bundle.status().message(), kExitError);
  }
  PullPlane plane(c, args.dir);
  seedd::Result<seedd::CompileCacheInstall> done =
      seedd::InstallCompileCacheBundle(*bundle, args.dir, &plane);
  if (!done.ok()) return Fail("installing into " + args.dir + ": " + done.status().message());
  plane.Discard();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "fetched compile cache %s/%s from %s in %.1f ms into %s: %zu files (%llu bytes) "
      "installed, %zu already there and as new or newer\n",
      args.ns.c_str(), args.key.c_str(), c.source.c_str(), ms, args.dir.c_str(), done->installed,
      static_cast<unsigned long long>(done->bytes), done->kept_newer);
  return kExitOk;
}

int RunList(const Connection& c, const std::string& prefix) {
  seedd::Json request = {{"kind", std::string(seedd::kCatalogKind)}};
  if (!prefix.empty()) request["prefix"] = prefix;
  int code = 0;
  auto response = Ask(c, std::move(request), &code);
  if (!response.ok()) return Fail(response.status().message(), code);
  if (StatusOf(*response) != "ok") {
    return Fail(c.source + " answered: " + seedd::ExplainSourceError(*response), kExitError);
  }
  seedd::Result<seedd::Catalog> catalog = seedd::ParseCatalog((*response)["payload"]);
  if (!catalog.ok()) {
    return Fail(c.source + " sent a bad catalog: " + catalog.status().message(), kExitError);
  }
  if (!catalog->models.empty()) {
    // Columns as wide as their widest entry, sizes right-aligned in binary units.
    int name_width = 5;
    int digest_width = 11;
    for (const auto& m : catalog->models) {
      name_width = std::max(name_width, static_cast<int>(m.name.size()));
      digest_width = std::max(digest_width, static_cast<int>(m.root_digest.size()));
    }
    std::printf("%-*s  %-*s  %10s  %6s\n", name_width, "MODEL", digest_width, "ROOT DIGEST", "SIZE",
                "FILES");
    for (const auto& m : catalog->models) {
      std::printf("%-*s  %-*s  %10s  %6llu\n", name_width, m.name.c_str(), digest_width,
                  m.root_digest.c_str(), seedd::HumanBytes(m.total_size).c_str(),
                  static_cast<unsigned long long>(m.files));
    }
  }
  if (!catalog->artifacts.empty()) {
    if (!catalog->models.empty()) std::printf("\n");
    std::printf("ARTIFACT KEY\n");
    for (const auto& k : catalog->artifacts) std::printf("%s\n", k.c_str());
  }
  if (catalog->truncated) {
    std::fprintf(stderr, "seedctl: the list was cut at %zu artifact keys; pass a longer prefix\n",
                 catalog->artifacts.size());
  }
  if (catalog->models.empty() && catalog->artifacts.empty()) {
    std::fprintf(stderr, "seedctl: %s serves no model and no artifact%s\n", c.source.c_str(),
                 prefix.empty() ? "" : (" under '" + prefix + "'").c_str());
  }
  return kExitOk;
}

}  // namespace seedctl
