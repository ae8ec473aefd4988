// The weight data plane over loopback: real daemons serving model directories,
// FetchModel pulling them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"
#include "seedd/tls.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "transport/client.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using testing::kToken;
using testing::ReadAll;
using testing::SameTree;
using testing::WriteRandom;

// Compares two files, skipping ranges that are holes in both (sparse files of
// several GiB stay cheap to compare).
bool SameSparseFile(const std::filesystem::path& a, const std::filesystem::path& b) {
  UniqueFd fa(::open(a.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd fb(::open(b.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fa.valid() || !fb.valid()) return false;
  struct stat sa {
  }, sb{};
  ::fstat(fa.get(), &sa);
  ::fstat(fb.get(), &sb);
  if (sa.st_size != sb.st_size) return false;
  const off_t size = sa.st_size;
  std::string ba(8 << 20, '\0'), bb(8 << 20, '\0');
  for (off_t off = 0; off < size;) {
    off_t da = ::lseek(fa.get(), off, SEEK_DATA);
    off_t db = ::lseek(fb.get(), off, SEEK_DATA);
    if (da < 0) da = size;
    if (db < 0) db = size;
    off = std::min(da, db);  // before it both read zeros
    if (off >= size) break;
    const size_t n = static_cast<size_t>(std::min<off_t>(ba.size(), size - off));
    if (::pread(fa.get(), ba.data(), n, off) != static_cast<ssize_t>(n) ||
        ::pread(fb.get(), bb.data(), n, off) != static_cast<ssize_t>(n) ||
        std::memcmp(ba.data(), bb.data(), n) != 0) {
      return false;
    }
    off += static_cast<off_t>(n);
  }
  return true;
}

class WeightsTest : public testing::WeightsFixture {};

// Flips the middle byte of every chunk of `m` in the copy under `dir`.
void FlipAByteOfEveryChunk(const Manifest& m, const std::filesystem::path& dir) {
  for (const ManifestChunk& c : m.chunks) {
    std::fstream f(dir / c.file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(c.offset + c.length / 2));
    char b = 0;
    f.get(b);
    f.seekp(static_cast<std::streamoff>(c.offset + c.length / 2));
    f.put(static_cast<char>(b ^ 0x5a));
  }
}

TEST_F(WeightsTest, TheModelHasAShardAndOtherFiles) {
  EXPECT_GT(std::filesystem::file_size(model_ / "model.safetensors"), 3000000u);
  EXPECT_EQ(std::filesystem::file_size(model_ / "blob.bin"), 2500000u);
}

TEST_F(WeightsTest, AMultiFileModelArrivesByteIdentical) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  FetchStats stats;
  Status s = FetchModel(m, {source}, dir_.path() / "dest", Options(), &stats);
  ASSERT_OK(s);
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.bytes_received, m.total_size);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / ".dest.seedd-staging"));
  // The destination holds this version now: a second pull moves nothing.
  FetchStats again;
  ASSERT_OK(FetchModel(m, {source}, dir_.path() / "dest", Options(), &again));
  EXPECT_TRUE(again.up_to_date);
  EXPECT_EQ(again.bytes_received, 0u);
}

TEST_F(WeightsTest, ChunksFromAFaultySourceAreDetectedAndFetchedFromAGoodOne) {
  // Enough chunks (64 more) that the faulty source is asked for several before
  // the good one has sent everything: it is dropped after its third bad chunk.
  WriteRandom(model_ / "large.bin", 16 << 20, 9);
  HostPort good = Serve(model_);
  Manifest m = ManifestFrom(good);
  // The faulty source hands out the good manifest but has flipped bytes in its
  // copy (a server that indexed its copy would notice the change and not serve it).
  std::filesystem::copy(model_, dir_.path() / "bad", std::filesystem::copy_options::recursive);
  HostPort bad = ServeWeights(std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, dir_.path() / "bad", nullptr, {}, nullptr, nullptr}}));
  // Every chunk of the bad copy has a flipped byte: whatever it serves is bad.
  FlipAByteOfEveryChunk(m, dir_.path() / "bad");
  testing::LogCapture logs;
  FetchStats stats;
  Status s = FetchModel(m, {bad, good}, dir_.path() / "dest", Options(), &stats);
  ASSERT_OK(s);
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "failed verification")) << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, bad.ToString()));
  EXPECT_GE(stats.chunks_rejected, 1u);
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{bad.ToString()});
}

// A model served with SHA-256 chunk digests: a fetcher verifies each chunk with
// SHA-256 (the manifest says so), catches every chunk of a faulty copy, skips
// holes whose SHA-256 is that of zeros, and ends byte-identical.
TEST_F(WeightsTest, Sha256ChunksAreVerifiedAsTheManifestSays) {
  {
    // 1 MiB of data, then a 2 MiB hole, then 1 MiB of data: whole chunks of zeros.
    WriteRandom(model_ / "sparse.bin", 1 << 20, 21);
    std::filesystem::resize_file(model_ / "sparse.bin", 3 << 20);
    std::ofstream f(model_ / "sparse.bin", std::ios::binary | std::ios::app);
    std::string tail(1 << 20, 'z');
    f << tail;
  }
  HostPort good = Serve(model_, "sha256");
  Manifest m = ManifestFrom(good);
  ASSERT_EQ(m.chunk_digest, ChunkDigest::kSha256);
  for (const ManifestChunk& c : m.chunks) ASSERT_EQ(c.digest.size(), 64u);
  std::filesystem::copy(model_, dir_.path() / "bad", std::filesystem::copy_options::recursive);
  FlipAByteOfEveryChunk(m, dir_.path() / "bad");
  HostPort bad = ServeWeights(std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, dir_.path() / "bad", nullptr, {}, nullptr, nullptr}}));
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {bad, good}, dir_.path() / "dest", Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_GE(stats.chunks_rejected, 1u);
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{bad.ToString()});
  FetchStats alone;
  ASSERT_OK(FetchModel(m, {good}, dir_.path() / "dest2", Options(), &alone));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest2"));
  EXPECT_GE(alone.chunks_holes, 8u);  // the hole's eight 256 KiB chunks were not sent
}

// A source answers "hole" for a chunk of zeros, and nothing is written; but a
// forged copy of that chunk from another source may have been written (then
// rejected) first. The hole is punched, so the staging file reads zeros again
// (before, the pull completed with the forged bytes in place).
TEST_F(WeightsTest, AHoleAfterARejectedCopyOfItReadsZeros) {
  const auto dir = dir_.path() / "holes";
  std::filesystem::create_directories(dir);
  WriteRandom(dir / "w.bin", 4096, 31);
  std::filesystem::resize_file(dir / "w.bin", (2 << 20) + 4096);  // then eight chunks of zeros
  HostPort good = Serve(dir);
  Manifest m = ManifestFrom(good);
  ASSERT_EQ(m.chunks.size(), 9u);
  const auto bad_dir = dir_.path() / "holes-bad";
  std::filesystem::create_directories(bad_dir);
  {
    std::string bytes = ReadAll(dir / "w.bin");
    for (const ManifestChunk& c : m.chunks) bytes[c.offset + c.length / 2] ^= 0x5a;
    std::ofstream(bad_dir / "w.bin", std::ios::binary) << bytes;
  }
  HostPort bad = ServeWeights(std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, bad_dir, nullptr, {}, nullptr, nullptr}}));
  // The forged source alone: its chunks are written as they arrive, then rejected;
  // the pull fails and its staging stays for the next one to resume.
  FetchOptions o = Options();
  FetchStats first;
  EXPECT_FALSE(FetchModel(m, {bad}, dir_.path() / "dest", o, &first).ok());
  EXPECT_GE(first.chunks_rejected, 3u);
  FetchStats second;
  ASSERT_OK(FetchModel(m, {good}, dir_.path() / "dest", o, &second));
  EXPECT_GE(second.chunks_holes, 1u);
  EXPECT_EQ(ReadAll(dir / "w.bin"), ReadAll(dir_.path() / "dest" / "w.bin"));
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
  auto server = std::make_shared<WeightServer>(
      std::vector<ServedModel>{{lying, model_, nullptr, {}, nullptr, nullptr}});
  source = ServeWeights(server);
  Status s = FetchModel(lying, {source}, dir_.path() / "checked", o);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("failed SHA-256 verification"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "checked"));
  // Without --verify sha256 only the chunk digests are checked.
  EXPECT_TRUE(FetchModel(lying, {source}, dir_.path() / "unchecked", Options()).ok());
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

TEST_F(WeightsTest, ASparseShardBeyondFourGibibytesArrivesByteIdenticalAndStaysSparse) {
  const auto dir = dir_.path() / "sparse";
  std::filesystem::create_directories(dir);
  // One U8 tensor of 5 GiB: offsets need 64 bits. Data at the start, past 4 GiB
  // and at the very end; holes between.
  const uint64_t bytes = 5ull << 30;
  const std::string header =
      Json{{"big", {{"dtype", "U8"}, {"shape", {bytes}}, {"data_offsets", {0, bytes}}}}}.dump();
  const auto path = dir / "big.safetensors";
  {
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << prefix << header;
  }
  const uint64_t size = 8 + header.size() + bytes;
  std::filesystem::resize_file(path, size);
  {
    std::mt19937_64 rng(9);
    std::string data(3 << 20, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t at :
         {uint64_t{4096}, uint64_t{(4ull << 30) + 12345}, uint64_t{size - data.size()}}) {
      f.seekp(static_cast<std::streamoff>(at));
      f.write(data.data(), static_cast<std::streamsize>(data.size()));
    }
  }
  WriteRandom(dir / "config.json", 700, 4);
  DaemonOptions o;
  o.seed.listen = HostPort{"127.0.0.1", 0};
  o.seed.token = kToken;
  o.cache_dir = dir_.path() / "cache-sparse";
  o.models = {{"tiny", dir}};
  o.weight_chunk_bytes = 64ull << 20;
  auto d = Daemon::Create(o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  HostPort source = **(*d)->Start();
  daemons_.push_back(std::move(*d));
  Manifest m = ManifestFrom(source);
  uint64_t last = 0;
  for (const ManifestChunk& c : m.chunks) last = std::max(last, c.offset);
  ASSERT_GT(last, 4ull << 30);
  FetchStats stats;
  Status s = FetchModel(m, {source}, dir_.path() / "dest", Options(), &stats);
  ASSERT_OK(s);
  EXPECT_TRUE(SameSparseFile(path, dir_.path() / "dest" / "big.safetensors"));
  EXPECT_EQ(ReadAll(dir / "config.json"), ReadAll(dir_.path() / "dest" / "config.json"));
  // Holes were neither sent nor written: a few data chunks crossed the wire.
  EXPECT_GT(stats.chunks_holes, 70u);
  EXPECT_LE(stats.bytes_received, 5 * (64ull << 20) + 700);
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() / "dest" / "big.safetensors").c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 1ull << 30);
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// The data plane over TLS in one process (so that the sanitizer build runs the
// TLS code): a fetcher verifying the server against a CA made by the openssl
// CLI pulls a model byte-identical, through the server's buffered encryption
// and the fetcher's decryption; a fetcher trusting another CA fails and writes
// nothing.
class TlsWeightsTest : public testing::WeightsFixture {};

TEST_F(TlsWeightsTest, AModelArrivesByteIdenticalOverTls) {
  const auto pki = dir_.path() / "pki";
  std::string error;
  ASSERT_TRUE(testing::MakeTestPki(pki, &error)) << error;
  TlsOptions server_options;
  server_options.cert = pki / "server.crt";
  server_options.key = pki / "server.key";
  auto server_tls = TlsContext::Create(server_options);
  ASSERT_OK(server_tls);
  WriteRandom(model_ / "big.bin", 12 << 20, 5);
  HostPort plain = Serve(model_);
  Manifest m = ManifestFrom(plain);
  TransportOptions topts;
  topts.tls = *server_tls;
  HostPort source = ServeWeights(std::make_shared<WeightServer>(std::vector<ServedModel>{
                                     {m, model_, nullptr, {}, nullptr, nullptr}}),
                                 topts);
  TlsOptions client_options;
  client_options.ca = pki / "ca.crt";
  auto client_tls = TlsContext::Create(client_options);
  ASSERT_OK(client_tls);
  FetchOptions o = Options();
  o.tls = *client_tls;
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dir_.path() / "dest", o, &stats));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.bytes_received, m.total_size);

  client_options.ca = pki / "other-ca.crt";
  auto stranger = TlsContext::Create(client_options);
  ASSERT_OK(stranger);
  o.tls = *stranger;
  o.timeout = std::chrono::seconds(2);
  Status refused = FetchModel(m, {source}, dir_.path() / "refused", o);
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "refused"));
}

}  // namespace
}  // namespace seedd
