// The compile_cache kind (seedd/compile_cache.h): the seedable that serves and
// adopts bundles, and the daemon's warmup. The bundle itself: bundle.cc.
#include "seedd/compile_cache.h"

#include <chrono>
#include <mutex>

#include "common/mutex.h"
#include "kinds/compile_cache/bundle.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

constexpr std::string_view kStoreFile = "compile_cache.json";

ArtifactKey StoreKey(std::string_view ns, std::string_view key) {
  return *ArtifactKey::Make(ns, key, kStoreFile);
}

// The disk store of published bundles: <cache_dir>/compile_cache/<ns>/<key>/.
ArtifactStorePtr CompileDiskStore(const std::filesystem::path& cache_dir) {
  DiskStoreOptions options;
  options.max_value_bytes = kMaxResponseBytes;
  return NewDiskArtifactStore("", cache_dir / "compile_cache", options);
}

// Whether `dir` holds any regular file (staging directories aside).
bool HasFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() == 0 && it->path().filename().string().rfind(kStagingPrefix, 0) == 0) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) return true;
  }
  return false;
}

// What the directory holds now, by path, size and time: a bundle built from an
// equal fingerprint is the same.
Result<std::string> Fingerprint(const CompileCacheSpec& spec) {
  Result<std::vector<FoundFile>> found = ListCacheFiles(spec);
  if (!found.ok()) return found.status();
  std::string out;
  for (const FoundFile& f : *found) {
    out += f.path + '\0' + std::to_string(f.size) + '\0' + std::to_string(f.mtime_ns) + '\n';
  }
  return out;
}

class CompileCacheSeedable final : public Seedable {
 public:
  CompileCacheSeedable(const std::filesystem::path& cache_dir, std::vector<CompileCacheSpec> served,
                       std::vector<std::shared_ptr<ArtifactStore>> shared,
                       std::shared_ptr<const TrustedKeys> trust,
                       std::shared_ptr<CompileCacheDataPlane> plane)
      : served_(std::move(served)),
        shared_(std::move(shared)),
        trust_(std::move(trust)),
        plane_(std::move(plane)),
        disk_(CompileDiskStore(cache_dir)),
        built_(served_.size()) {}

  std::string_view kind() const override { return kCompileCacheKind; }

  Result<Json> RequestParams(const Json& ctx) const override {
    SEEDD_RETURN_IF_ERROR(ValidateCompileCacheKey(ctx));
    return Json{{"namespace", ctx["namespace"]}, {"key", ctx["key"]}};
  }

  Result<std::optional<Json>> Resolve(const Json& request) const override {
    Result<std::optional<std::string>> text = ResolveText(request);
    if (!text.ok() || !text->has_value()) return text.status();
    Result<Json> bundle = ParseJson(**text);
    if (!bundle.ok()) return bundle.status();
    return std::optional<Json>(std::move(*bundle));
  }

  // The listener's path: a cache this daemon serves from its directory, else a
  // bundle published on the local disk, else in the shared stores.
  Result<std::optional<std::string>> ResolveText(const Json& request) const override {
    SEEDD_RETURN_IF_ERROR(ValidateCompileCacheKey(request));
    const std::string ns = request["namespace"].get<std::string>();
    const std::string key = request["key"].get<std::string>();
    for (size_t i = 0; i < served_.size(); ++i) {
      if (served_[i].name != ns || served_[i].key != key) continue;
      Result<std::optional<std::string>> text = ServedText(i);
      if (!text.ok() || text->has_value()) return text;
      break;  // cold here too: maybe published earlier
    }
    Result<std::optional<std::string>> text = disk_->Get(StoreKey(ns, key));
    for (size_t i = 0; text.ok() && !text->has_value() && i < shared_.size(); ++i) {
      text = shared_[i]->Get(StoreKey(ns, key));
    }
    if (!text.ok() || !text->has_value()) return text;
    // A store's bytes go into a response frame: they must be one JSON value.
    Result<Json> bundle = ParseJson(**text);
    if (!bundle.ok()) return bundle.status().WithContext("a stored compile cache bundle");
    return text;
  }

  Result<Json> ValidatePayload(const Json& payload) const override {
    // The key and factors are checked in Install, which has the ctx.
    if (!payload.is_object()) return Status::InvalidArgument("the bundle must be an object");
    return payload;
  }

  Status Install(const Json& ctx, const Json& payload) override {
    SEEDD_RETURN_IF_ERROR(ValidateCompileCacheKey(ctx));
    auto dir = ctx.find("dir");
    if (dir == ctx.end() || !dir->is_string() || dir->get<std::string>().empty()) {
      return Status::InvalidArgument("the adopting context names no directory");
    }
    CompileFactors local;
    if (auto f = ctx.find("factors"); f != ctx.end() && f->is_object()) {
      for (auto it = f->begin(); it != f->end(); ++it) local[it.key()] = FactorText(it.value());
    }
    Result<Json> valid = ValidateCompileCacheBundle(payload, ctx["namespace"].get<std::string>(),
                                                    ctx["key"].get<std::string>(), local,
                                                    kMaxCompileCacheBytes, trust_.get());
    if (!valid.ok()) return valid.status();
    Result<CompileCacheInstall> done =
        InstallCompileCacheBundle(*valid, dir->get<std::string>(), plane_.get());
    if (!done.ok()) return done.status();
    last_install_ = *done;
    last_by_reference_ = HasCompileCacheContent(*valid);
    return Status::Ok();
  }

  // What the last Install did (the adopting thread's).
  CompileCacheInstall last_install_;
  bool last_by_reference_ = false;

 private:
  // The bundle of served_[i]'s directory, nullopt when it holds no file. Built
  // once per state of the directory (paths, sizes and times, read with stat
  // alone), one request at a time, and reused by the requests that follow:
  // reading and hashing a whole cache per request would let a few peers keep a
  // core busy.
  Result<std::optional<std::string>> ServedText(size_t i) const {
    MutexLock lock(bundle_mu_);
    Result<std::string> now = Fingerprint(served_[i]);
    if (!now.ok()) return now.status();
    if (now->empty()) return std::optional<std::string>();
    Built& built = built_[i];
    if (built.text == nullptr || built.fingerprint != *now) {
      Result<Json> bundle = BundleCompileCache(served_[i], plane_.get());
      if (!bundle.ok()) return bundle.status();
      built.text = std::make_shared<const std::string>(DumpJson(*bundle));
      built.fingerprint = std::move(*now);
    }
    return std::optional<std::string>(*built.text);
  }

  std::vector<CompileCacheSpec> served_;
  std::vector<std::shared_ptr<ArtifactStore>> shared_;
  std::shared_ptr<const TrustedKeys> trust_;
  std::shared_ptr<CompileCacheDataPlane> plane_;
  ArtifactStorePtr disk_;
  struct Built {
    std::string fingerprint;
    std::shared_ptr<const std::string> text;
  };
  mutable Mutex bundle_mu_;
  mutable std::vector<Built> built_ GUARDED_BY(bundle_mu_);  // by served_ index
};

}  // namespace

SeedablePtr NewCompileCacheSeedable(const std::filesystem::path& cache_dir,
                                    std::vector<CompileCacheSpec> served,
                                    std::vector<std::shared_ptr<ArtifactStore>> shared,
                                    std::shared_ptr<const TrustedKeys> trust,
                                    std::shared_ptr<CompileCacheDataPlane> plane) {
  return std::make_shared<CompileCacheSeedable>(cache_dir, std::move(served), std::move(shared),
                                                std::move(trust), std::move(plane));
}

Result<CompileCacheWarmupReport> WarmCompileCache(
    const CompileCacheSpec& spec, const std::filesystem::path& cache_dir,
    const std::vector<std::shared_ptr<ArtifactStore>>& shared, const SeedTransport& transport,
    std::shared_ptr<CompileCacheDataPlane> plane) {
  const auto began = std::chrono::steady_clock::now();
  CompileCacheWarmupReport report;
  ArtifactStorePtr disk = CompileDiskStore(cache_dir);
  const ArtifactKey store_key = StoreKey(spec.name, spec.key);
  const std::string label = std::string(kCompileCacheKind) + " " + spec.name;
  auto install = [&](const std::string& text, const std::string& from) -> bool {
    Result<Json> bundle = ParseJson(text);
    if (!bundle.ok()) {
      Logger().warn("{}: the bundle from {} is not JSON: {}", label, from,
                    bundle.status().message());
      return false;
    }
    Result<Json> valid = ValidateCompileCacheBundle(*bundle, spec.name, spec.key, spec.factors,
                                                    spec.max_bytes, spec.trust.get());
    if (!valid.ok()) {
      Logger().warn("{}: rejected the bundle from {}: {}", label, from, valid.status().message());
      return false;
    }
    Result<CompileCacheInstall> done = InstallCompileCacheBundle(*valid, spec.dir, plane.get());
    if (!done.ok()) {
      Logger().warn("{}: installing the bundle from {} failed: {}", label, from,
                    done.status().message());
      return false;
    }
    report.install = *done;
    report.source = from;
    report.by_reference = HasCompileCacheContent(*valid);
    return true;
  };
  if (HasFiles(spec.dir)) {
    report.source = "warm already";
  } else {
    Result<std::optional<std::string>> local = disk->Get(store_key);
    bool adopted = local.ok() && local->has_value() && install(**local, "local disk");
    for (size_t i = 0; !adopted && i < shared.size(); ++i) {
      Result<std::optional<std::string>> got = shared[i]->Get(store_key);
      adopted =
          got.ok() && got->has_value() && install(**got, "shared store " + shared[i]->Describe());
    }
    if (!adopted) {
      CompileCacheSeedable seedable(cache_dir, {}, {}, spec.trust, plane);
      Json factors = Json::object();
      for (const auto& [n, v] : spec.factors) factors[n] = v;
      std::string why;
      AdoptOutcome outcome = transport.Adopt(seedable,
                                             Json{{"namespace", spec.name},
                                                  {"key", spec.key},
                                                  {"dir", spec.dir.string()},
                                                  {"factors", std::move(factors)}},
                                             &why);
      if (outcome == AdoptOutcome::kAdopted) {
        report.source = "peer";
        report.install = seedable.last_install_;
        report.by_reference = seedable.last_by_reference_;
      } else {
        report.source = "none";
      }
    }
  }
  // Publish what the directory holds now, for the next cold host.
  // A daemon that trusts signed bundles only and cannot sign publishes nothing:
  // its unsigned bundle would replace a signed one.
  const bool can_publish = spec.trust == nullptr || spec.sign_key != nullptr;
  if (!can_publish) {
    Logger().info(
        "{}: not published: this daemon trusts signed bundles only and has no --sign-key to sign "
        "its own",
        label);
  } else if (HasFiles(spec.dir)) {
    Result<Json> bundle = BundleCompileCache(spec, plane.get());
    if (!bundle.ok()) {
      Logger().warn("{}: not published: {}", label, bundle.status().message());
    } else {
      const std::string text = DumpJson(*bundle);
      Status put = disk->Put(store_key, text);
      if (!put.ok()) return put.WithContext(label + ": publishing to the local disk store");
      for (const auto& store : shared) {
        Status s = store->Put(store_key, text);
        if (!s.ok())
          Logger().warn("{}: publishing to {} failed: {}", label, store->Describe(), s.message());
      }
      report.published = true;
      report.by_reference = report.by_reference || HasCompileCacheContent(*bundle);
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return report;
}

}  // namespace seedd
