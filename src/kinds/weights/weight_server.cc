#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/logging.h"
#include "common/unique_fd.h"
#include "kinds/weights/data_plane.h"
#include "wire/frame.h"

namespace seedd {
namespace {

constexpr int kIdleTimeoutMs = 60000;  // a data connection idle this long is closed

void PutU32(uint32_t v, char* p) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}
void PutU64(uint64_t v, char* p) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

WeightServer::WeightServer(std::vector<ServedModel> models) {
  for (auto& m : models) {
    std::string name = m.manifest.model;
    by_name_.emplace(name, std::move(m));
  }
  for (const auto& [name, m] : by_name_) by_root_[m.manifest.root_digest] = &m;
}

const ServedModel* WeightServer::FindModel(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

void WeightServer::Serve(int fd, const Json& request) const {
  auto root = request.find("root_digest");
  auto it = root != request.end() && root->is_string() ? by_root_.find(root->get<std::string>())
                                                       : by_root_.end();
  if (it == by_root_.end()) {
    std::string frame =
        EncodeJsonFrame(Json{{"status", "error"}, {"message", "no model with that root_digest"}});
    SendAll(fd, frame.data(), frame.size());
    return;
  }
  const ServedModel& model = *it->second;
  const auto& chunks = model.manifest.chunks;
  std::string ok = EncodeJsonFrame(Json{{"status", "ok"}, {"chunks", chunks.size()}});
  if (!SendAll(fd, ok.data(), ok.size())) return;
  std::map<std::string, UniqueFd> files;
  char req[8];
  size_t have = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kIdleTimeoutMs) <= 0) return;
    ssize_t r = ::recv(fd, req + have, sizeof(req) - have, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;  // the fetcher is done
    have += static_cast<size_t>(r);
    if (have < sizeof(req)) continue;
    have = 0;
    if (std::memcmp(req, "SDRQ", 4) != 0) return;  // not our protocol: drop the peer
    uint32_t index = 0;
    for (int i = 4; i < 8; ++i) index = (index << 8) | static_cast<unsigned char>(req[i]);
    char header[24] = {'S', 'D', 'C', 'H'};
    PutU32(index, header + 4);
    if (index >= chunks.size()) {
      PutU32(1, header + 8);
      if (!SendAll(fd, header, sizeof(header))) return;
      continue;
    }
    const ManifestChunk& c = chunks[index];
    UniqueFd& file = files[c.file];
    if (!file.valid()) {
      file.Reset(::open((model.dir / c.file).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!file.valid()) {
        Logger().warn("weight_data: cannot open {}: {}", (model.dir / c.file).string(),
                      std::strerror(errno));
        return;
      }
    }
    PutU64(c.length, header + 16);
    if (!SendAll(fd, header, sizeof(header))) return;
    off_t offset = static_cast<off_t>(c.offset);
    uint64_t left = c.length;
    while (left > 0) {  // straight from the page cache to the socket
      ssize_t w = ::sendfile(fd, file.get(), &offset, std::min<uint64_t>(left, 1ull << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      left -= static_cast<uint64_t>(w);
    }
  }
}

namespace {

class WeightShardsSeedable final : public Seedable {
 public:
  explicit WeightShardsSeedable(std::shared_ptr<const WeightServer> server)
      : server_(std::move(server)) {}
  std::string_view kind() const override { return kWeightShardsKind; }
  Result<Json> RequestParams(const Json& ctx) const override { return ctx; }
  Result<std::optional<Json>> Resolve(const Json& request) const override {
    auto model = request.find("model");
    if (model == request.end()) return Status::InvalidArgument("missing field 'model'");
    if (!model->is_string()) return Status::InvalidArgument("field 'model' must be a string");
    const ServedModel* m = server_->FindModel(model->get<std::string>());
    if (m == nullptr) return std::optional<Json>();
    auto fp = request.find("fingerprint");
    if (fp != request.end() && (!fp->is_string() || *fp != m->manifest.fingerprint)) {
      return Status::FailedPrecondition("model '" + m->manifest.model + "' has fingerprint " +
                                        m->manifest.fingerprint + ", not the one requested");
    }
    return std::optional<Json>(m->manifest.ToJson());
  }
  Result<Json> ValidatePayload(const Json& payload) const override {
    Result<Manifest> m = ParseManifest(payload);
    if (!m.ok()) return m.status();
    return payload;
  }
  // The bytes move on the data plane (FetchModel), not through Install.
  Status Install(const Json&, const Json&) override {
    return Status::FailedPrecondition("weight_shards are installed with FetchModel");
  }

 private:
  std::shared_ptr<const WeightServer> server_;
};

}  // namespace

SeedablePtr NewWeightShardsSeedable(std::shared_ptr<const WeightServer> server) {
  return std::make_shared<WeightShardsSeedable>(std::move(server));
}

}  // namespace seedd
