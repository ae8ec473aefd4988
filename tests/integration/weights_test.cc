// The weight data plane over loopback: real daemons serving model directories,
// FetchModel pulling them.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "kinds/weights/data_plane.h"
#include "seedd/daemon.h"
#include "support/test_util.h"
#include "transport/client.h"
#include "wire/frame.h"

namespace seedd {
namespace {

const char kToken[] = "weights-token";

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
    auto rel = std::filesystem::relative(e.path(), a);
    if (ReadAll(e.path()) != ReadAll(b / rel)) return false;
  }
  size_t other = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(b)) other += e.is_regular_file();
  return files == other;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path() / "model";
    std::filesystem::create_directories(model_);
    // A safetensors shard, an opaque large file, small files and a nested one.
    std::string header = R"({"w":{"dtype":"U8","shape":[3000000],"data_offsets":[0,3000000]}})";
    std::string shard(8, '\0');
    for (int i = 0; i < 8; ++i) shard[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    shard += header;
    std::mt19937_64 rng(1);
    for (int i = 0; i < 3000000; ++i) shard.push_back(static_cast<char>(rng()));
    std::ofstream(model_ / "model.safetensors", std::ios::binary) << shard;
    WriteRandom(model_ / "blob.bin", 2500000, 2);
    WriteRandom(model_ / "tokenizer" / "tokenizer.json", 1000, 3);
    std::ofstream(model_ / "empty.txt").close();
  }
  void TearDown() override {
    for (auto& d : daemons_) d->Stop();
  }

  // A daemon serving `dir` as model "tiny" with 256 KiB chunks.
  HostPort Serve(const std::filesystem::path& dir) {
    DaemonOptions o;
    o.seed.listen = HostPort{"127.0.0.1", 0};
    o.seed.token = kToken;
    o.cache_dir = dir_.path() / ("cache" + std::to_string(daemons_.size()));
    o.models = {{"tiny", dir}};
    o.weight_chunk_bytes = 256 * 1024;
    auto d = Daemon::Create(o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    auto bound = (*d)->Start();
    daemons_.push_back(std::move(*d));
    return **bound;
  }

  Manifest ManifestFrom(const HostPort& source) {
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

  FetchOptions Options() {
    FetchOptions o;
    o.token = kToken;
    o.connections_per_source = 2;
    return o;
  }

  testing::TempDir dir_;
  std::filesystem::path model_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

TEST_F(WeightsTest, TheModelHasAShardAndOtherFiles) {
  EXPECT_GT(std::filesystem::file_size(model_ / "model.safetensors"), 3000000u);
  EXPECT_EQ(std::filesystem::file_size(model_ / "blob.bin"), 2500000u);
}

TEST_F(WeightsTest, AMultiFileModelArrivesByteIdentical) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  FetchStats stats;
  Status s = FetchModel(m, {source}, dir_.path() / "dest", Options(), &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.bytes_received, m.total_size);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / ".dest.seedd-staging"));
  // The destination exists now: a second pull into it is refused.
  EXPECT_EQ(FetchModel(m, {source}, dir_.path() / "dest", Options()).code(),
            StatusCode::kAlreadyExists);
}

TEST_F(WeightsTest, ChunksFromAFaultySourceAreDetectedAndFetchedFromAGoodOne) {
  HostPort good = Serve(model_);
  // The faulty source serves the same manifest but flipped bytes in its copy.
  std::filesystem::copy(model_, dir_.path() / "bad", std::filesystem::copy_options::recursive);
  HostPort bad = Serve(dir_.path() / "bad");
  Manifest m = ManifestFrom(good);
  {
    std::fstream f(dir_.path() / "bad" / "blob.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    for (std::streamoff off : {10, 300000, 1000000, 2400000}) {
      f.seekp(off);
      f.put('\x5a');
    }
  }
  // The bad copy's own manifest differs, so give both sources the good one.
  testing::LogCapture logs;
  FetchStats stats;
  Status s = FetchModel(m, {bad, good}, dir_.path() / "dest", Options(), &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "failed verification")) << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, bad.ToString()));
}

TEST_F(WeightsTest, ARestartedFetchTransfersOnlyTheMissingChunks) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  // A first fetch from a source that dies: nothing is served, the staging stays.
  FetchOptions o = Options();
  Status first = FetchModel(m, {HostPort{"127.0.0.1", 1}}, dir_.path() / "dest", o);
  EXPECT_FALSE(first.ok());
  // Simulate a fetch that got some chunks: verified bytes and their journal records.
  const auto staging = dir_.path() / ".dest.seedd-staging";
  ASSERT_TRUE(std::filesystem::exists(staging));
  uint64_t resumed_bytes = 0;
  {
    std::ofstream journal(staging / ".seedd-journal", std::ios::binary | std::ios::app);
    for (uint32_t i = 0; i < m.chunks.size(); i += 2) {
      const ManifestChunk& c = m.chunks[i];
      std::string data = ReadAll(model_ / c.file).substr(c.offset, c.length);
      std::fstream f(staging / c.file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(c.offset));
      f.write(data.data(), static_cast<std::streamsize>(data.size()));
      unsigned char rec[4] = {static_cast<unsigned char>(i >> 24),
                              static_cast<unsigned char>(i >> 16),
                              static_cast<unsigned char>(i >> 8), static_cast<unsigned char>(i)};
      journal.write(reinterpret_cast<char*>(rec), 4);
      resumed_bytes += c.length;
    }
  }
  FetchStats stats;
  Status s = FetchModel(m, {source}, dir_.path() / "dest", o, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.bytes_received, m.total_size - resumed_bytes);
  EXPECT_EQ(stats.chunks_resumed, (m.chunks.size() + 1) / 2);
}

TEST_F(WeightsTest, VerifySha256ChecksEveryFileBeforeCommitting) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  FetchOptions o = Options();
  o.verify_sha256 = true;
  ASSERT_TRUE(FetchModel(m, {source}, dir_.path() / "good", o).ok());
  EXPECT_TRUE(SameTree(model_, dir_.path() / "good"));
  // A source whose manifest's file digest disagrees with its bytes (every chunk
  // digest still matches).
  Json j = m.ToJson();
  j["files"][0]["sha256"] = std::string(64, 'e');
  j["root_digest"] = ManifestRootDigest(j);
  Manifest lying = *ParseManifest(j);
  auto server = std::make_shared<const WeightServer>(std::vector<ServedModel>{{lying, model_}});
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", 0};
  config.token = kToken;
  TransportOptions topts;
  topts.stream_handlers["weight_data"] = [server](int fd, const Json& r) { server->Serve(fd, r); };
  auto liar = SeedTransport::Create({NewWeightShardsSeedable(server)}, config, topts);
  auto liar_addr = (*liar)->StartListener();
  source = **liar_addr;
  Status s = FetchModel(lying, {source}, dir_.path() / "checked", o);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("failed SHA-256 verification"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "checked"));
  // Without --verify sha256 only the chunk digests are checked.
  EXPECT_TRUE(FetchModel(lying, {source}, dir_.path() / "unchecked", Options()).ok());
  (*liar)->Close();
}

TEST_F(WeightsTest, AnUnauthenticatedDataConnectionIsRefused) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  UniqueFd fd = testing::ConnectRaw(source);
  testing::SendAll(
      fd.get(), EncodeJsonFrame(Json{
                    {"kind", "weight_data"}, {"root_digest", m.root_digest}, {"token", "wrong"}}));
  EXPECT_EQ(testing::ReadResponse(fd.get()),
            Json({{"status", "error"}, {"message", "Unauthorized request"}}));
  FetchOptions o = Options();
  o.token = "wrong";
  EXPECT_FALSE(FetchModel(m, {source}, dir_.path() / "dest", o).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "dest"));
}

TEST_F(WeightsTest, AFetcherThatHangsUpMidStreamDoesNotHurtTheServer) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  for (int round = 0; round < 5; ++round) {
    UniqueFd fd = testing::ConnectRaw(source);
    testing::SendAll(
        fd.get(), EncodeJsonFrame(Json{
                      {"kind", "weight_data"}, {"root_digest", m.root_digest}, {"token", kToken}}));
    ASSERT_EQ(testing::ReadResponse(fd.get())["status"], "ok");
    std::string requests;  // every chunk, many times over: far more than socket buffers hold
    for (int repeat = 0; repeat < 40; ++repeat) {
      for (uint32_t i = 0; i < m.chunks.size(); ++i) {
        requests += "SDRQ";
        for (int b = 3; b >= 0; --b) requests.push_back(static_cast<char>((i >> (8 * b)) & 0xff));
      }
    }
    testing::SendAll(fd.get(), requests);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the server start sending
    // Gone without reading: the server's writes now hit a closed socket.
    linger hard{1, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  }
  // Still serving (a SIGPIPE would have ended this process).
  ASSERT_TRUE(FetchModel(m, {source}, dir_.path() / "dest", Options()).ok());
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
}

TEST_F(WeightsTest, AnUnknownRootDigestGetsAnError) {
  HostPort source = Serve(model_);
  UniqueFd fd = testing::ConnectRaw(source);
  testing::SendAll(fd.get(), EncodeJsonFrame(Json{{"kind", "weight_data"},
                                                  {"root_digest", std::string(64, '0')},
                                                  {"token", kToken}}));
  EXPECT_EQ(testing::ReadResponse(fd.get())["message"], "no model with that root_digest");
}

TEST_F(WeightsTest, ASmallTmpfsIsAClearErrorAndNothingUnderTheFinalName) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  const auto mnt = dir_.path() / "small";
  std::filesystem::create_directories(mnt);
  // A real 4 MiB filesystem for a model of about 5.5 MB.
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m"), 0) << std::strerror(errno);
  FetchStats stats;
  Status s = FetchModel(m, {source}, mnt / "dest", Options(), &stats);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("not enough space"), std::string::npos) << s.message();
  EXPECT_EQ(stats.bytes_received, 0u);  // checked before any byte moved
  EXPECT_FALSE(std::filesystem::exists(mnt / "dest"));
  ::umount(mnt.c_str());
}

TEST_F(WeightsTest, TooLittleSpaceIsAClearErrorBeforeAnyByteMoves) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  m.total_size += 1ull << 50;  // more than any disk here; checked before fetching
  Status s = FetchModel(m, {source}, dir_.path() / "dest", Options());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("not enough space"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "dest"));
}

}  // namespace
}  // namespace seedd
