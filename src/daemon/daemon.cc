#include "seedd/daemon.h"

#include <cstdlib>
#include <fstream>

#include "common/logging.h"
#include "seedd/artifact_kind.h"
#include "seedd/store_registry.h"

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

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options) {
  std::vector<ArtifactStorePtr> shared;
  for (const std::string& url : options.store_urls) {
    Result<ArtifactStorePtr> store = OpenArtifactStore(url);
    if (!store.ok()) return store.status();
    Logger().info("Shared store {} is ready", RedactStoreUrl(url));
    // At run time a failing shared store is a warning and a miss, never a crash.
    shared.push_back(NewTolerantStore(std::move(*store)));
  }
  std::vector<SeedablePtr> seedables = {NewArtifactSeedable(options.cache_dir, std::move(shared))};
  Result<std::unique_ptr<SeedTransport>> transport =
      SeedTransport::Create(std::move(seedables), options.seed, options.transport);
  if (!transport.ok()) return transport.status();
  return std::unique_ptr<Daemon>(new Daemon(std::move(options), std::move(*transport)));
}

Daemon::Daemon(DaemonOptions options, std::unique_ptr<SeedTransport> transport)
    : options_(std::move(options)), transport_(std::move(transport)) {}

Daemon::~Daemon() { Stop(); }

Result<std::optional<HostPort>> Daemon::Start() {
  std::error_code ec;
  std::filesystem::create_directories(options_.cache_dir, ec);
  if (ec) {
    return Status::IoError("cannot create the cache directory " + options_.cache_dir.string() +
                           ": " + ec.message());
  }
  Result<std::optional<HostPort>> bound = transport_->StartListener();
  if (!bound.ok()) return bound.status();
  if (bound->has_value()) {
    Logger().info("Serving {} on {} from {}", kArtifactKind, (*bound)->ToString(),
                  options_.cache_dir.string());
  }
  return bound;
}

void Daemon::Stop() { transport_->Close(); }

}  // namespace seedd
