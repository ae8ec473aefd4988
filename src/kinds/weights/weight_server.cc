#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/crypto.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "kinds/weights/data_plane.h"
#include "kinds/weights/records.h"
#include "wire/frame.h"

namespace seedd {
namespace {

constexpr int kIdleTimeoutMs = 60000;                // a data connection idle this long is closed
constexpr auto kPeerTtl = std::chrono::seconds(10);  // a relay silent this long is gone
constexpr size_t kMaxPeersPerSwarm = 4096;
constexpr size_t kMaxRelayText = 300;

bool SendHeader(int fd, std::string_view magic, uint32_t index, uint32_t status, uint32_t aux,
                uint64_t length) {
  const HeaderRecord h = EncodeHeader(magic, index, status, aux, length);
  return SendAll(fd, h.data(), h.size());
}

// True when [offset, offset + length) of `fd` holds no data (a hole reads as zeros).
bool IsHole(int fd, uint64_t offset, uint64_t length) {
  off_t data = ::lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  if (data < 0) return errno == ENXIO;  // no data from offset to the end
  return static_cast<uint64_t>(data) >= offset + length;
}

}  // namespace

ChunkSet::ChunkSet(size_t size) : size_(size), words_(new std::atomic<uint64_t>[(size + 63) / 64]) {
  for (size_t i = 0; i < (size + 63) / 64; ++i) words_[i].store(0, std::memory_order_relaxed);
}

void ChunkSet::Set(size_t i) {
  words_[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
}

bool ChunkSet::Test(size_t i) const {
  return i < size_ && (words_[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
}

std::string ChunkSet::Bitmap() const {
  std::string bits((size_ + 7) / 8, '\0');
  for (size_t i = 0; i < size_; ++i) {
    if (Test(i)) bits[i / 8] = static_cast<char>(bits[i / 8] | (0x80 >> (i % 8)));
  }
  return bits;
}

WeightServer::WeightServer(std::vector<ServedModel> models) {
  for (auto& m : models) Publish(std::move(m));
}

void WeightServer::Publish(ServedModel model) {
  auto m = std::make_shared<const ServedModel>(std::move(model));
  std::lock_guard<std::mutex> lock(mu_);
  auto old = by_name_.find(m->manifest.model);
  if (old != by_name_.end() && old->second->manifest.root_digest != m->manifest.root_digest) {
    by_root_.erase(old->second->manifest.root_digest);
  }
  by_name_[m->manifest.model] = m;
  by_root_[m->manifest.root_digest] = m;
}

std::shared_ptr<const ServedModel> WeightServer::FindModel(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::shared_ptr<const ServedModel> WeightServer::FindRoot(const std::string& root) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_root_.find(root);
  return it == by_root_.end() ? nullptr : it->second;
}

int WeightServer::Announce(const std::string& root, const std::string& relay,
                           const std::string& session, size_t chunks) {
  std::lock_guard<std::mutex> lock(mu_);
  Swarm& swarm = swarms_[root];
  if (swarm.claims.size() != chunks) swarm.claims.assign(chunks, Claim{});
  auto it = swarm.ids.find(relay);
  if (it == swarm.ids.end()) {
    if (swarm.addrs.size() >= kMaxPeersPerSwarm) return -1;
    it = swarm.ids.emplace(relay, static_cast<int>(swarm.addrs.size())).first;
    swarm.addrs.push_back(relay);
    swarm.seen.emplace_back();
    swarm.sessions.push_back(session);
  }
  const int id = it->second;
  if (swarm.sessions[id] != session) {
    // The relay started over (a restart with an empty cache, say): what it was
    // sent before may be gone.
    swarm.sessions[id] = session;
    for (Claim& c : swarm.claims) {
      if (c.holder == id) c = Claim{};
    }
  }
  swarm.seen[id] = std::chrono::steady_clock::now();
  return id;
}

std::vector<std::string> WeightServer::Peers(const std::string& root, const std::string& except) {
  std::vector<std::string> peers;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end()) return peers;
  const auto now = std::chrono::steady_clock::now();
  for (size_t id = 0; id < it->second.addrs.size(); ++id) {
    if (now - it->second.seen[id] < kPeerTtl && it->second.addrs[id] != except) {
      peers.push_back(it->second.addrs[id]);
    }
  }
  return peers;
}

uint32_t WeightServer::ClaimChunk(const std::string& root, int peer, uint32_t index,
                                  uint32_t* aux) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || index >= it->second.claims.size()) return kChunkOk;
  Swarm& swarm = it->second;
  Claim& claim = swarm.claims[index];
  const auto now = std::chrono::steady_clock::now();
  if (claim.holder >= 0 && claim.holder != peer && now - swarm.seen[claim.holder] < kPeerTtl) {
    // A live relay has it (or is getting it): the asker should fetch it there.
    if (claim.sending) {
      *aux = 0xffffffff;
    } else {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - claim.sent_at).count();
      *aux = static_cast<uint32_t>(std::min<int64_t>(ms, 0xfffffffe));
    }
    return kChunkClaimed;
  }
  if (peer >= 0) claim = Claim{peer, true, {}};
  return kChunkOk;
}

void WeightServer::EndSend(const std::string& root, int peer, uint32_t index, bool complete) {
  if (peer < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = swarms_.find(root);
  if (it == swarms_.end() || index >= it->second.claims.size()) return;
  Claim& claim = it->second.claims[index];
  if (claim.holder != peer || !claim.sending) return;
  if (complete) {
    claim.sending = false;
    claim.sent_at = std::chrono::steady_clock::now();
  } else {
    claim = Claim{};  // it never arrived: anyone may ask for it again
  }
}

void WeightServer::Serve(int fd, const Json& request) {
  auto root_field = request.find("root_digest");
  const std::string root = root_field != request.end() && root_field->is_string()
                               ? root_field->get<std::string>()
                               : std::string();
  std::shared_ptr<const ServedModel> model = root.empty() ? nullptr : FindRoot(root);
  auto error = [fd](const std::string& message) {
    std::string frame = EncodeJsonFrame(Json{{"status", "error"}, {"message", message}});
    SendAll(fd, frame.data(), frame.size());
  };
  if (model == nullptr) return error("no model with that root_digest");
  std::string relay;
  if (auto r = request.find("relay"); r != request.end()) {
    if (!r->is_string() || r->get<std::string>().size() > kMaxRelayText ||
        !ParseHostPort(r->get<std::string>()).ok()) {
      return error("invalid relay (expected HOST:PORT)");
    }
    relay = r->get<std::string>();
  }
  std::string session;
  if (auto r = request.find("session"); r != request.end()) {
    if (!r->is_string() || r->get<std::string>().size() > 64) {
      return error("invalid session (expected a string of at most 64 bytes)");
    }
    session = r->get<std::string>();
  }
  const size_t chunk_count = model->manifest.chunks.size();
  const int peer = relay.empty() ? -1 : Announce(root, relay, session, chunk_count);
  std::string ok = EncodeJsonFrame(Json{{"status", "ok"}, {"chunks", chunk_count}});
  if (!SendAll(fd, ok.data(), ok.size())) return;
  std::map<std::string, UniqueFd> files;
  RequestRecord req;
  size_t have = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kIdleTimeoutMs) <= 0) return;
    ssize_t r = ::recv(fd, req.data() + have, req.size() - have, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;  // the fetcher is done
    have += static_cast<size_t>(r);
    if (have < req.size()) continue;
    have = 0;
    const std::string_view magic(req.data(), 4);
    const bool state = magic == kStateMagic;
    const bool claim = magic == kClaimMagic;
    if (!state && !claim && magic != kSendMagic) return;  // not our protocol
    const uint32_t index = RequestIndex(req);
    // A fetching daemon publishes its model again when it completes: follow it.
    std::shared_ptr<const ServedModel> now = FindRoot(root);
    if (now == nullptr) return;  // no longer served
    if (now != model) {
      files.clear();
      model = std::move(now);
    }
    const auto& chunks = model->manifest.chunks;
    if (state) {
      if (peer >= 0) Announce(root, relay, session, chunk_count);
      std::string body;
      if (model->available) {
        body = model->available->Bitmap();
      } else {
        body.assign((chunks.size() + 7) / 8, '\xff');
        if (chunks.size() % 8 != 0) body.back() = static_cast<char>(0xff00 >> (chunks.size() % 8));
      }
      for (const std::string& addr : Peers(root, relay)) body += addr + "\n";
      if (!SendHeader(fd, kStateMagic, 0, kChunkOk, 0, body.size())) return;
      if (!SendAll(fd, body.data(), body.size())) return;
      continue;
    }
    if (index >= chunks.size() || (model->available && !model->available->Test(index))) {
      if (!SendHeader(fd, kChunkMagic, index, kChunkNotHere, 0, 0)) return;
      continue;
    }
    uint32_t aux = 0;
    if (claim && ClaimChunk(root, peer, index, &aux) == kChunkClaimed) {
      if (!SendHeader(fd, kChunkMagic, index, kChunkClaimed, aux, 0)) return;
      continue;
    }
    const ManifestChunk& c = chunks[index];
    UniqueFd& file = files[c.file];
    if (!file.valid()) {
      file.Reset(::open((model->dir / c.file).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!file.valid() && model->available) {
        // A fetch moving its staging directory into place; published again soon.
        files.erase(c.file);
        EndSend(root, peer, index, false);
        if (!SendHeader(fd, kChunkMagic, index, kChunkNotHere, 0, 0)) return;
        continue;
      }
      if (!file.valid()) {
        Logger().warn("weight_data: cannot open {}: {}", (model->dir / c.file).string(),
                      std::strerror(errno));
        EndSend(root, peer, index, false);
        return;
      }
    }
    if (IsHole(file.get(), c.offset, c.length)) {
      EndSend(root, peer, index, true);
      if (!SendHeader(fd, kChunkMagic, index, kChunkHole, 0, 0)) return;
      continue;
    }
    bool sent = SendHeader(fd, kChunkMagic, index, kChunkOk, 0, c.length);
    off_t offset = static_cast<off_t>(c.offset);
    uint64_t left = c.length;
    while (sent && left > 0) {  // straight from the page cache to the socket
      ssize_t w = ::sendfile(fd, file.get(), &offset, std::min<uint64_t>(left, 1ull << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        sent = false;
        break;
      }
      left -= static_cast<uint64_t>(w);
      bytes_served_.fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
    }
    EndSend(root, peer, index, sent);
    if (!sent) return;
  }
}

namespace {

class WeightShardsSeedable final : public Seedable {
 public:
  WeightShardsSeedable(std::shared_ptr<WeightServer> server, WeightInstallOptions install)
      : server_(std::move(server)), install_(std::move(install)) {}
  std::string_view kind() const override { return kWeightShardsKind; }
  Result<Json> RequestParams(const Json& ctx) const override { return ctx; }
  Result<std::optional<Json>> Resolve(const Json& request) const override {
    auto model = request.find("model");
    if (model == request.end()) return Status::InvalidArgument("missing field 'model'");
    if (!model->is_string()) return Status::InvalidArgument("field 'model' must be a string");
    std::shared_ptr<const ServedModel> m = server_->FindModel(model->get<std::string>());
    if (m == nullptr) return std::optional<Json>();
    auto fp = request.find("fingerprint");
    if (fp != request.end() && (!fp->is_string() || *fp != m->manifest.fingerprint)) {
      return Status::FailedPrecondition("model '" + m->manifest.model + "' has fingerprint " +
                                        m->manifest.fingerprint + ", not the one requested");
    }
    std::string relay;
    if (auto r = request.find("relay"); r != request.end() && r->is_string()) {
      relay = r->get<std::string>();
    }
    Json manifest = m->manifest.ToJson();
    // Where to fetch: the relays of this root digest (not part of the digest).
    for (std::string& peer : server_->Peers(m->manifest.root_digest, relay)) {
      manifest["sources"].push_back(std::move(peer));
    }
    return std::optional<Json>(std::move(manifest));
  }
  Result<Json> ValidatePayload(const Json& payload) const override {
    Result<Manifest> m = ParseManifest(payload);
    if (!m.ok()) return m.status();
    return payload;
  }
  Status Install(const Json& ctx, const Json& payload) override {
    if (install_.sources.empty()) {
      return Status::FailedPrecondition("no source to fetch the model's bytes from");
    }
    auto name_it = ctx.find("model");
    if (name_it == ctx.end() || !name_it->is_string()) {
      return Status::InvalidArgument("field 'model' must be a string");
    }
    const std::string name = name_it->get<std::string>();
    if (!ValidateRelativePath(name).ok() || name.find('/') != std::string::npos) {
      return Status::InvalidArgument("model name '" + name + "' is not a single path component");
    }
    Result<Manifest> manifest = ParseManifest(payload);
    if (!manifest.ok()) return manifest.status();
    if (manifest->model != name) {
      return Status::InvalidArgument("the source sent the manifest of model '" + manifest->model +
                                     "', not '" + name + "'");
    }
    const std::filesystem::path base = install_.cache_dir / "weights" / name;
    const std::filesystem::path dir = base / manifest->fingerprint;
    std::error_code ec;
    std::filesystem::create_directories(base, ec);
    if (ec) return Status::IoError("create " + base.string() + ": " + ec.message());
    if (!std::filesystem::exists(dir, ec)) {
      FetchOptions fetch;
      fetch.token = install_.token;
      if (auto r = ctx.find("relay"); r != ctx.end() && r->is_string()) fetch.relay = *r;
      fetch.verified = std::make_shared<ChunkSet>(manifest->chunks.size());
      // Other fetchers may take what is verified already from here.
      Manifest partial = *manifest;
      partial.sources.clear();
      server_->Publish(ServedModel{std::move(partial), StagingDir(dir), fetch.verified});
      FetchStats stats;
      const auto start = std::chrono::steady_clock::now();
      SEEDD_RETURN_IF_ERROR(FetchModel(*manifest, install_.sources, dir, fetch, &stats));
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Logger().info(
          "Pulled model {} ({} bytes) in {:.2f} s ({:.1f} MB/s; {} bytes from {} relays, {} "
          "resumed chunks)",
          name, manifest->total_size, secs, manifest->total_size / 1e6 / std::max(secs, 1e-9),
          stats.bytes_from_peers, stats.peers.size(), stats.chunks_resumed);
    }
    // Switch <name>/current atomically: a new link renamed over the old one.
    const std::filesystem::path tmp = base / (".current-" + RandomHex(4));
    std::filesystem::create_directory_symlink(manifest->fingerprint, tmp, ec);
    if (!ec) std::filesystem::rename(tmp, base / "current", ec);
    if (ec) return Status::IoError("switch " + (base / "current").string() + ": " + ec.message());
    manifest->sources.clear();
    Logger().info("Serving model {} from {}: {} files, {} bytes, root digest {}", name,
                  dir.string(), manifest->files.size(), manifest->total_size,
                  manifest->root_digest);
    server_->Publish(ServedModel{std::move(*manifest), dir, nullptr});
    return Status::Ok();
  }

 private:
  std::shared_ptr<WeightServer> server_;
  const WeightInstallOptions install_;
};

}  // namespace

SeedablePtr NewWeightShardsSeedable(std::shared_ptr<WeightServer> server,
                                    WeightInstallOptions install) {
  return std::make_shared<WeightShardsSeedable>(std::move(server), std::move(install));
}

}  // namespace seedd
