// seedctl's local subcommands: manifest, store, gc, push.
#include <fcntl.h>
#include <stdio.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "seedctl.h"
#include "seedd/artifact_kind.h"
#include "seedd/daemon.h"
#include "seedd/origins.h"
#include "seedd/store_registry.h"
#include "seedd/units.h"
#include "seedd/weights.h"

namespace seedctl {

namespace {

// A key a daemon would serve: KIND/CONFIG_HASH/FILENAME under the artifact
// kind's rules (which the autotune tables' keys follow too).
seedd::Status ValidateServedKey(const std::string& text) {
  size_t a = text.find('/');
  size_t b = a == std::string::npos ? a : text.find('/', a + 1);
  if (b == std::string::npos || text.find('/', b + 1) != std::string::npos) {
    return seedd::Status::InvalidArgument("invalid key '" + text +
                                          "': expected KIND/CONFIG_HASH/FILENAME");
  }
  seedd::Json fields = {{"namespace", text.substr(0, a)},
                        {"config_hash", text.substr(a + 1, b - a - 1)},
                        {"filename", text.substr(b + 1)}};
  seedd::Result<seedd::ArtifactKey> key = seedd::ArtifactKeyFromFields(fields);
  if (!key.ok()) {
    return seedd::Status::InvalidArgument("no daemon would serve '" + text +
                                          "': " + ExplainKeyError(key.status().message()));
  }
  return seedd::Status::Ok();
}

}  // namespace

std::string ExplainKeyError(const std::string& message) {
  if (message == "invalid config_hash") {
    return message + " (expected 16-128 lowercase hex digits, e.g. a SHA-256 in hex)";
  }
  return message;
}

int RunManifest(const std::string& spec, std::string model, uint64_t chunk_bytes,
                const std::string& chunk_digest, const std::string& sign_key) {
  auto dir = seedd::ResolveModelDir(spec);
  if (!dir.ok()) {
    return Fail(dir.status().message(), kExitError);
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
  options.chunk_size = chunk_bytes;
  auto algo = seedd::ParseChunkDigest(chunk_digest, "--chunk-digest");
  if (!algo.ok()) return Fail(algo.status().message());
  options.chunk_digest = *algo;
  if (!sign_key.empty()) {
    auto key = seedd::SigningKey::Load(sign_key);
    if (!key.ok()) return Fail("--sign-key: " + key.status().message(), 2);
    options.sign_key = std::move(*key);
  }
  auto manifest = seedd::BuildManifest(model, *dir, options);
  if (!manifest.ok()) {
    std::fprintf(stderr, "seedctl: %s\n", manifest.status().message().c_str());
    return kExitError;
  }
  std::printf("%s\n", manifest->ToJson().dump(2).c_str());
  return kExitOk;
}

int RunKeyFingerprint(const std::vector<std::string>& files) {
  int code = kExitOk;
  for (const std::string& f : files) {
    auto fp = seedd::KeyFingerprint(f);
    if (!fp.ok()) {
      std::fprintf(stderr, "seedctl: %s\n", fp.status().message().c_str());
      code = 2;
      continue;
    }
    std::printf("%s  %s\n", fp->c_str(), f.c_str());
  }
  return code;
}

int RunStore(const std::string& op, const std::string& url, const std::string& key_text,
             const std::string& file) {
  if (op == "put") {  // before the store is even opened
    if (seedd::Status served = ValidateServedKey(key_text); !served.ok()) {
      return Fail(served.message());
    }
  }
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

int RunGc(const std::string& cache_dir, int keep_versions, bool dry_run) {
  const std::filesystem::path dir =
      cache_dir.empty() ? seedd::DefaultCacheDir() : std::filesystem::path(cache_dir);
  seedd::GcOptions options;
  options.keep_versions = keep_versions;
  options.dry_run = dry_run;
  seedd::Result<seedd::GcReport> report = seedd::CollectWeightsGarbage(dir, options);
  if (!report.ok()) return Fail(report.status().message(), kExitError);
  for (const auto& p : report->removed) {
    std::printf("%s %s\n", dry_run ? "would remove" : "removed", p.c_str());
  }
  std::printf("%s %zu item(s), %.1f MiB, under %s\n", dry_run ? "would remove" : "removed",
              report->removed.size(), report->bytes / 1048576.0, (dir / "weights").c_str());
  return kExitOk;
}

}  // namespace seedctl

namespace seedctl {

int RunPush(const std::string& url, const std::string& from, const seedd::OriginAccess& access) {
  if (!seedd::IsOriginUrl(url)) {
    return Fail(url + ": push to oci://REGISTRY/REPOSITORY:TAG or s3://BUCKET/PREFIX");
  }
  seedd::Result<std::filesystem::path> dir = seedd::ResolveModelDir(from);
  if (!dir.ok()) return Fail("--from: " + dir.status().message());
  int64_t last = -1;
  seedd::Result<seedd::OriginPush> pushed =
      seedd::PushToRegistry(url, *dir, access, [&](uint64_t done, uint64_t total) {
        const int64_t percent = total == 0 ? 100 : static_cast<int64_t>(done * 100 / total);
        if (percent / 10 == last / 10) return;
        last = percent;
        std::fprintf(stderr, "seedctl: pushing %s: %s of %s\n", url.c_str(),
                     seedd::HumanBytes(done).c_str(), seedd::HumanBytes(total).c_str());
      });
  if (!pushed.ok()) {
    return Fail(pushed.status().message(),
                pushed.status().code() == seedd::StatusCode::kNotFound ? kExitMiss : kExitError);
  }
  if (url.rfind("s3://", 0) == 0) {
    std::printf(
        "pushed %s (%llu files, %s%s) in %s; its version as readers list it: %s\n"
        "serve it: seedd --model NAME=%s\n",
        pushed->url.c_str(), static_cast<unsigned long long>(pushed->files),
        seedd::HumanBytes(pushed->total_bytes).c_str(),
        pushed->multipart_files == 0
            ? ""
            : ("; " + std::to_string(pushed->multipart_files) + " in parts").c_str(),
        seedd::HumanSeconds(pushed->seconds).c_str(), pushed->manifest.c_str(),
        pushed->url.c_str());
    return kExitOk;
  }
  std::printf(
      "pushed %s (%llu files, %s; %s sent, the rest held by the repository already) as %s in %s\n"
      "pin it: %s@%s\n",
      pushed->url.c_str(), static_cast<unsigned long long>(pushed->files),
      seedd::HumanBytes(pushed->total_bytes).c_str(), seedd::HumanBytes(pushed->bytes_sent).c_str(),
      pushed->manifest.c_str(), seedd::HumanSeconds(pushed->seconds).c_str(),
      pushed->url.substr(0, pushed->url.rfind(':')).c_str(), pushed->manifest.c_str());
  return kExitOk;
}

}  // namespace seedctl
