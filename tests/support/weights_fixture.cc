#include "support/weights_fixture.h"

#include <poll.h>
#include <sys/socket.h>

#include <fstream>
#include <random>

#include "common/crypto.h"
#include "seedd/json_text.h"
#include "transport/client.h"
#include "transport/data_auth.h"
#include "wire/frame.h"

namespace seedd::testing {

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteRandom(const std::filesystem::path& p, size_t n, unsigned seed) {
  std::filesystem::create_directories(p.parent_path());
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  std::ofstream(p, std::ios::binary) << s;
}

bool SameTree(const std::filesystem::path& a, const std::filesystem::path& b) {
  size_t files = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    ++files;
    auto rel = e.path().lexically_relative(a);
    if (ReadAll(e.path()) != ReadAll(b / rel)) return false;
  }
  size_t other = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(b)) other += e.is_regular_file();
  return files == other;
}

void WriteShard(const std::filesystem::path& p, size_t bytes, unsigned seed) {
  std::filesystem::create_directories(p.parent_path());
  const std::string header = "{\"w\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(bytes) +
                             "],\"data_offsets\":[0," + std::to_string(bytes) + "]}}";
  std::string shard(8, '\0');
  for (int i = 0; i < 8; ++i) shard[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  shard += header;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < bytes; ++i) shard.push_back(static_cast<char>(rng()));
  std::ofstream(p, std::ios::binary | std::ios::trunc) << shard;
}

std::filesystem::path MakeHubModel(const std::filesystem::path& hub, const std::string& repo,
                                   const std::map<std::string, std::string>& files,
                                   const std::string& commit) {
  std::string folder = "models--" + repo;
  if (size_t slash = folder.find('/'); slash != std::string::npos) folder.replace(slash, 1, "--");
  const auto root = hub / folder;
  const auto snapshot = root / "snapshots" / commit;
  std::filesystem::create_directories(root / "blobs");
  std::filesystem::create_directories(root / "refs");
  for (const auto& [name, bytes] : files) {
    const std::string blob = Sha256Hex(bytes);
    std::ofstream(root / "blobs" / blob, std::ios::binary) << bytes;
    const auto link = snapshot / name;
    std::filesystem::create_directories(link.parent_path());
    std::string up = "../../";
    for (char c : name) up += c == '/' ? "../" : "";
    std::filesystem::create_symlink(up + "blobs/" + blob, link);
  }
  std::ofstream(root / "refs" / "main") << commit;
  return snapshot;
}

Record Ask(int fd, const char* magic, uint32_t index, const std::string& body) {
  std::string req(magic, 4);
  for (int b = 3; b >= 0; --b) req.push_back(static_cast<char>((index >> (8 * b)) & 0xff));
  SendAll(fd, req + body);
  unsigned char h[24];
  size_t got = 0;
  while (got < sizeof(h)) {
    ssize_t r = ::recv(fd, h + got, sizeof(h) - got, 0);
    if (r <= 0) return Record{0, 0xdead, 0, {}};
    got += static_cast<size_t>(r);
  }
  auto u32 = [&](int at) {
    return (uint32_t{h[at]} << 24) | (uint32_t{h[at + 1]} << 16) | (uint32_t{h[at + 2]} << 8) |
           h[at + 3];
  };
  uint64_t length = (uint64_t{u32(16)} << 32) | u32(20);
  Record rec{u32(4), u32(8), u32(12), std::string(length, '\0')};
  for (size_t n = 0; n < length;) {
    ssize_t r = ::recv(fd, rec.body.data() + n, length - n, 0);
    if (r <= 0) return Record{0, 0xdead, 0, {}};
    n += static_cast<size_t>(r);
  }
  return rec;
}

std::string AskWhole(int fd, const char* magic, uint32_t index, size_t bytes, bool* whole) {
  std::string req(magic, 4);
  for (int b = 3; b >= 0; --b) req.push_back(static_cast<char>((index >> (8 * b)) & 0xff));
  SendAll(fd, req);
  *whole = false;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 5000) != 1) return "";
  std::string answer(bytes, '\0');
  const ssize_t at_once = ::recv(fd, answer.data(), bytes, MSG_DONTWAIT);
  *whole = at_once == static_cast<ssize_t>(bytes);
  for (size_t got = at_once > 0 ? static_cast<size_t>(at_once) : 0; got < bytes;) {
    const ssize_t r = ::recv(fd, answer.data() + got, bytes - got, 0);
    if (r <= 0) return "";
    got += static_cast<size_t>(r);
  }
  return answer;
}

UniqueFd Announce(const HostPort& server, const std::string& root, const std::string& relay,
                  const std::string& zone) {
  UniqueFd fd = ConnectRaw(server);
  Json request{{"kind", "weight_data"},
               {"root_digest", root},
               {"token", kToken},
               {"relay", relay},
               {"session", "s-" + relay}};
  if (!zone.empty()) request["zone"] = zone;
  SendAll(fd.get(), EncodeJsonFrame(request));
  EXPECT_EQ(ReadResponse(fd.get())["status"], "ok");
  return fd;
}

UniqueFd OpenData(const HostPort& server, const std::string& root_digest, Json* answer) {
  UniqueFd fd = ConnectRaw(server);
  SendAll(fd.get(), EncodeJsonFrame(Json{
                        {"kind", "weight_data"}, {"root_digest", root_digest}, {"token", kToken}}));
  *answer = ReadResponse(fd.get());
  return fd;
}

void WeightsFixture::SetUp() {
  model_ = dir_.path() / "model";
  std::filesystem::create_directories(model_);
  WriteShard(model_ / "model.safetensors", 3000000, 1);
  WriteRandom(model_ / "blob.bin", 2500000, 2);
  WriteRandom(model_ / "tokenizer" / "tokenizer.json", 1000, 3);
  std::ofstream(model_ / "empty.txt").close();
}

void WeightsFixture::TearDown() {
  for (auto& t : transports_) t->Close();
  for (auto& d : daemons_) d->Stop();
}

HostPort WeightsFixture::Serve(const std::filesystem::path& dir, const std::string& chunk_digest) {
  DaemonOptions o;
  o.seed.listen = HostPort{"127.0.0.1", 0};
  o.seed.token = kToken;
  o.cache_dir = dir_.path() / ("cache" + std::to_string(daemons_.size()));
  o.models = {{"tiny", dir}};
  o.weight_chunk_bytes = 256 * 1024;
  o.weight_chunk_digest = chunk_digest;
  auto d = Daemon::Create(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  auto bound = (*d)->Start();
  daemons_.push_back(std::move(*d));
  return **bound;
}

HostPort WeightsFixture::ServeWeights(std::shared_ptr<WeightServer> server,
                                      TransportOptions topts) {
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", 0};
  config.token = kToken;
  topts.stream_handlers["weight_data"] = [server](Conn& conn, const Json& r) {
    server->Serve(conn, r);
  };
  auto t = SeedTransport::Create({NewWeightShardsSeedable(server)}, config, topts);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  HostPort addr = **(*t)->StartListener();
  transports_.push_back(std::move(*t));
  return addr;
}

Manifest WeightsFixture::ManifestFrom(const HostPort& source) {
  SeedConfig config;
  config.source = source;
  config.token = kToken;
  auto t = SeedTransport::Create({}, config);
  auto r = (*t)->Request(Json{{"kind", "weight_shards"}, {"model", "tiny"}});
  EXPECT_TRUE(r.has_value() && (*r)["status"] == "ok");
  auto m = ParseManifest((*r)["payload"]);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

FetchOptions WeightsFixture::Options() {
  FetchOptions o;
  o.token = kToken;
  o.connections_per_source = 2;
  return o;
}

StalledOrigin::StalledOrigin(const std::filesystem::path& model) {
  Result<IndexedModel> index = IndexModel("tiny", model, BuildOptions{});
  EXPECT_OK(index);
  auto server =
      std::make_shared<WeightServer>(std::vector<ServedModel>{ServeIndexed(std::move(*index))});
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", 0};
  config.token = kToken;
  TransportOptions options;
  options.stream_handlers["weight_data"] = [this](Conn&, const Json&) {
    ++entered_;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return released_; });
  };
  auto t = SeedTransport::Create({NewWeightShardsSeedable(server)}, config, options);
  EXPECT_OK(t);
  addr_ = **(*t)->StartListener();
  transport_ = std::move(*t);
}

StalledOrigin::~StalledOrigin() { Close(); }

void StalledOrigin::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
  }
  cv_.notify_all();
  transport_->Close();
}

Json AnswerDataChallenge(int fd, const std::string& request) {
  Result<Json> hello = ParseJson(request);
  if (!hello.ok() || !AsksForChallenge(*hello)) return Json();
  const std::string nonce(kDataNonceHexBytes, 'a');
  SendAll(fd, EncodeJsonFrame(Json{{"status", "challenge"},
                                   {"auth", kDataAuthScheme},
                                   {"nonce", nonce},
                                   {"proof", DataProof(kToken, "source", *hello, nonce, "")}}));
  return ReadResponse(fd);
}

}  // namespace seedd::testing
