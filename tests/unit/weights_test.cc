#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "common/crypto.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/files/model_index.h"
#include "kinds/weights/files/safetensors.h"
#include "kinds/weights/progress_log.h"
#include "kinds/weights/proto/records.h"
#include "seedd/daemon.h"
#include "seedd/json_text.h"
#include "support/test_util.h"

namespace seedd {
namespace {

struct Tensor {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  uint64_t bytes;
};

// Writes a safetensors file; returns its header length.
void WriteSafetensors(const std::filesystem::path& p, const std::vector<Tensor>& tensors) {
  Json header = Json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << len << h;
  std::mt19937 rng(static_cast<unsigned>(off));
  for (uint64_t i = 0; i < off; ++i) out.put(static_cast<char>(rng()));
}

std::string Prefix(const std::string& header_json, uint64_t claimed_len) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((claimed_len >> (8 * i)) & 0xff);
  return len + header_json;
}

std::string HeaderError(const std::string& json, uint64_t data_bytes) {
  std::string prefix = Prefix(json, json.size());
  auto r = ParseSafetensorsHeader(prefix, prefix.size() + data_bytes);
  return r.ok() ? "ok" : r.status().message();
}

TEST(Safetensors, ParsesTensorsWithAbsoluteByteRanges) {
  std::string json =
      R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},"__metadata__":{}})";
  std::string prefix = Prefix(json, json.size());
  auto h = ParseSafetensorsHeader(prefix, prefix.size() + 12);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].begin, 8 + json.size());
  EXPECT_EQ(h->tensors[0].end, 8 + json.size() + 12);
}

TEST(Safetensors, RejectsHostileHeaders) {
  std::string ok = R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})";
  EXPECT_EQ(HeaderError(ok, 12), "ok");
  // A header longer than its file.
  auto longer = ParseSafetensorsHeader(Prefix(ok, 1 << 20), 8 + ok.size());
  EXPECT_NE(longer.status().message().find("longer than the file"), std::string::npos);
  auto huge = ParseSafetensorsHeader(Prefix(ok, 1ull << 40), 1ull << 41);
  EXPECT_NE(huge.status().message().find("over the 100 MiB limit"), std::string::npos);
  EXPECT_NE(HeaderError(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,2]}})", 2)
                .find("unknown dtype 'F17'"),
            std::string::npos);
  EXPECT_NE(HeaderError(R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})", 11)
                .find("fall outside"),
            std::string::npos);
  EXPECT_NE(HeaderError(R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,10]}})", 12)
                .find("not what its dtype and shape need"),
            std::string::npos);
  EXPECT_NE(
      HeaderError(
          R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
          12)
          .find("overlap"),
      std::string::npos);
  EXPECT_NE(HeaderError(R"([1,2])", 0).find("not a JSON object"), std::string::npos);
  EXPECT_NE(HeaderError(R"({"w":{"dtype":"F16"}})", 0).find("needs dtype, shape and data_offsets"),
            std::string::npos);
  EXPECT_FALSE(ParseSafetensorsHeader("short", 5).ok());
}

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path() / "model";
    WriteSafetensors(model_ / "model-00001-of-00002.safetensors",
                     {{"a.weight", "F16", {64, 64}, 8192}, {"a.bias", "F32", {64}, 256}});
    WriteSafetensors(model_ / "model-00002-of-00002.safetensors",
                     {{"b.weight", "BF16", {300, 100}, 60000}});
    std::ofstream(model_ / "config.json") << R"({"hidden_size": 64})";
    std::filesystem::create_directories(model_ / "tokenizer");
    std::ofstream(model_ / "tokenizer" / "tokenizer.json") << R"({"vocab": {}})";
    options_.chunk_size = 16384;
    options_.digest_cache = dir_.path() / "digests";
    options_.sources = {"127.0.0.1:7420"};
    // The layout the tests below check; new manifests default to SHA-256
    // (Manifest.NewManifestsDigestChunksWithSha256ByDefault).
    options_.chunk_digest = ChunkDigest::kXxh3;
  }
  Json Built() {
    auto m = BuildManifest("tiny", model_, options_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m->ToJson();
  }
  // Re-seals a tampered manifest with a correct root digest, so the check under
  // test is the one that fires.
  static Json Reseal(Json j) {
    j["root_digest"] = ManifestRootDigest(j);
    return j;
  }
  static std::string Error(const Json& j) {
    auto r = ParseManifest(j);
    return r.ok() ? "accepted" : r.status().message();
  }
  testing::TempDir dir_;
  std::filesystem::path model_;
  BuildOptions options_;
};

TEST_F(ManifestTest, DescribesEveryFileTensorAndChunk) {
  Json j = Built();
  EXPECT_EQ(j["files"].size(), 4u);
  EXPECT_EQ(j["files"][3]["path"], "tokenizer/tokenizer.json");
  EXPECT_EQ(j["tensors"].size(), 3u);
  uint64_t total = 0;
  for (const auto& f : j["files"]) total += f["size"].get<uint64_t>();
  EXPECT_EQ(j["total_size"], total);
  // The second shard (60000 data bytes + header) spans four 16 KiB chunks.
  int shard2 = 0;
  for (const auto& c : j["chunks"]) shard2 += c["file"] == "model-00002-of-00002.safetensors";
  EXPECT_EQ(shard2, 4);
  auto parsed = ParseManifest(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->root_digest, j["root_digest"]);
  // Chunk digests are XXH3-128 of the bytes.
  std::ifstream in(model_ / "config.json", std::ios::binary);
  std::string config((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(j["chunks"][0]["xxh3"], Xxh3Hex(config));
  EXPECT_EQ(j["files"][0]["sha256"], Sha256Hex(config));
  EXPECT_FALSE(j.contains("chunk_digest"));  // XXH3-128 manifests are as they always were
}

// The root digest is the SHA-256 of the manifest's compact text without
// root_digest, sources and signatures (and, from format 2, the model's name):
// the text every seedd and the Python reference hash, whatever the fields are.
TEST_F(ManifestTest, TheRootDigestHashesTheManifestWithoutItsPerCopyFields) {
  auto expected = [](Json j) {
    j.erase("root_digest");
    j.erase("sources");
    j.erase("signatures");
    if (j.value("format", 1) >= 2) j.erase("model");
    return Sha256Hex(DumpJson(j));
  };
  Json j = Built();
  j["sources"] = {"10.0.0.1:7420", "10.0.0.2:7420"};
  j["signatures"] = Json::array({{{"key", "k"}, {"sig", "s"}}});
  j["zz \"odd\" key \u00e9"] = {{"nested", Json::array({1, 2.5, nullptr, true, "t\u00e9xt"})}};
  EXPECT_EQ(ManifestRootDigest(j), expected(j));
  j["format"] = 2;
  EXPECT_EQ(ManifestRootDigest(j), expected(j));
  Json renamed = j;
  renamed["model"] = "other";
  renamed["sources"] = Json::array();
  EXPECT_EQ(ManifestRootDigest(renamed), ManifestRootDigest(j));
  j["format"] = 1;
  renamed["format"] = 1;
  EXPECT_NE(ManifestRootDigest(renamed), ManifestRootDigest(j));
}

TEST_F(ManifestTest, Sha256ChunksAreNamedInTheManifestAndSealedByTheRootDigest) {
  Json xxh3 = Built();
  options_.chunk_digest = ChunkDigest::kSha256;
  Json j = Built();  // the digest cache holds XXH3 entries: they must not be reused
  EXPECT_EQ(j["chunk_digest"], "sha256");
  std::ifstream in(model_ / "config.json", std::ios::binary);
  std::string config((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(j["chunks"][0]["sha256"], Sha256Hex(config));
  EXPECT_FALSE(j["chunks"][0].contains("xxh3"));
  EXPECT_EQ(j["chunks"].size(), xxh3["chunks"].size());
  for (const auto& c : j["chunks"]) EXPECT_EQ(c["sha256"].get<std::string>().size(), 64u);
  EXPECT_NE(j["root_digest"], xxh3["root_digest"]);
  EXPECT_EQ(j["fingerprint"], xxh3["fingerprint"]);  // the same weights
  auto parsed = ParseManifest(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->chunk_digest, ChunkDigest::kSha256);
  EXPECT_EQ(parsed->chunks[0].digest, Sha256Hex(config));
  EXPECT_EQ(parsed->ToJson(), j);
  // Built again, the cache answers with SHA-256 entries.
  BuildStats again;
  ASSERT_TRUE(BuildManifest("tiny", model_, options_, &again).ok());
  EXPECT_EQ(again.bytes_hashed, 0u);
}

// cp -p, or an archive made with SOURCE_DATE_EPOCH, rewrites a file keeping
// its size and mtime: the digest cache must not answer with the old digests.
TEST_F(ManifestTest, ARewriteKeepingSizeAndMtimeIsHashedAgain) {
  const Json before = Built();
  const auto config = model_ / "config.json";
  struct stat st {};
  ASSERT_EQ(::stat(config.c_str(), &st), 0);
  std::ofstream(config, std::ios::trunc) << R"({"hidden_size": 96})";  // the same size
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, config.c_str(), times, 0), 0);
  BuildStats again;
  auto m = BuildManifest("tiny", model_, options_, &again);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(again.bytes_hashed, static_cast<uint64_t>(st.st_size));  // that file alone
  std::ifstream in(config, std::ios::binary);
  const std::string now((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(m->ToJson()["chunks"][0]["xxh3"], Xxh3Hex(now));
  EXPECT_NE(m->ToJson()["root_digest"], before["root_digest"]);
}

TEST_F(ManifestTest, AManifestNamingAnUnknownOrMismatchedChunkDigestIsRefused) {
  options_.chunk_digest = ChunkDigest::kSha256;
  const Json good = Built();
  Json j = good;
  j["chunk_digest"] = "md5";
  EXPECT_NE(Error(Reseal(j)).find("unknown chunk digest 'md5'"), std::string::npos)
      << Error(Reseal(j));
  j = good;
  j["chunk_digest"] = 7;
  EXPECT_NE(Error(Reseal(j)).find("'chunk_digest' must be a string"), std::string::npos);
  j = good;
  j.erase("chunk_digest");  // now XXH3 is expected, and the chunks carry sha256 keys
  EXPECT_NE(Error(Reseal(j)).find("bad xxh3"), std::string::npos) << Error(Reseal(j));
  j = good;
  j["chunks"][0]["sha256"] = std::string(32, 'a');  // an XXH3-sized digest under sha256
  EXPECT_NE(Error(Reseal(j)).find("bad sha256"), std::string::npos);
  j = good;
  j.erase("chunk_digest");  // a downgrade to (forgeable) XXH3 digests, not resealed
  for (auto& c : j["chunks"]) {
    c["xxh3"] = std::string(32, '0');
    c.erase("sha256");
  }
  EXPECT_EQ(Error(j), "manifest: root digest does not match the manifest");
  EXPECT_FALSE(ParseChunkDigest("SHA256", "--chunk-digest").ok());
  EXPECT_EQ(ParseChunkDigest("sha256", "--chunk-digest").value(), ChunkDigest::kSha256);
}

// --relay-upload-rate: bits per second as tc and cloud egress limits give them,
// or bytes; a value without a unit, with an unknown one, or out of range is an
// error that names the flag and shows the form.
TEST(ParseRate, ReadsBitAndByteRatesAndRejectsTheRest) {
  EXPECT_EQ(ParseRate("45mbit", "--relay-upload-rate").value(), 45u * 1000 * 1000 / 8);
  EXPECT_EQ(ParseRate("2.5gbit", "--relay-upload-rate").value(), 2500u * 1000 * 1000 / 8);
  EXPECT_EQ(ParseRate("800kbit", "--relay-upload-rate").value(), 100u * 1000);
  EXPECT_EQ(ParseRate("100MB", "--relay-upload-rate").value(), 100u * 1000 * 1000);
  EXPECT_EQ(ParseRate("3kB", "--relay-upload-rate").value(), 3000u);
  EXPECT_EQ(ParseRate("1GB", "--relay-upload-rate").value(), 1000u * 1000 * 1000);
  EXPECT_EQ(ParseRate("0", "--relay-upload-rate").value(), 0u);
  for (const char* bad : {"", "45", "mbit", "45 mbit", "45Mbit", "45mb", "-5mbit", "1.2.3mbit",
                          "4kbit", "20TB", "1e9mbit", "45mbitx"}) {
    Result<uint64_t> r = ParseRate(bad, "--relay-upload-rate");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--relay-upload-rate: '"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find("e.g. 45mbit"), std::string::npos) << bad;
  }
}

TEST_F(ManifestTest, TheFingerprintFollowsContentNotTimeAndTheCacheSparesRehashing) {
  BuildStats first, second, third;
  auto a = BuildManifest("tiny", model_, options_, &first);
  auto b = BuildManifest("tiny", model_, options_, &second);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(first.bytes_hashed, 0u);
  EXPECT_EQ(second.bytes_hashed, 0u);  // every digest came from the cache
  EXPECT_EQ(a->fingerprint, b->fingerprint);
  EXPECT_EQ(a->root_digest, b->root_digest);
  std::ofstream(model_ / "config.json") << R"({"hidden_size": 65})";  // new content, new mtime
  auto c = BuildManifest("tiny", model_, options_, &third);
  EXPECT_EQ(third.bytes_hashed, 19u);  // only config.json was read again
  EXPECT_NE(c->fingerprint, a->fingerprint);
}

TEST_F(ManifestTest, ALinkThatLeavesTheModelIsRefusedNamingIt) {
  std::filesystem::create_symlink("/etc/passwd", model_ / "passwd");
  auto m = IndexModel("tiny", model_, options_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("passwd links to /etc/passwd, outside"), std::string::npos)
      << m.status().message();
  std::filesystem::remove(model_ / "passwd");
  std::filesystem::create_symlink("missing.json", model_ / "dangling.json");
  m = IndexModel("tiny", model_, options_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("dangling.json is a broken link"), std::string::npos)
      << m.status().message();
}

TEST_F(ManifestTest, ALinkInsideTheModelIsServedUnderItsOwnName) {
  std::filesystem::create_symlink("config.json", model_ / "alias.json");
  auto m = IndexModel("tiny", model_, options_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->files.at("alias.json").read_path, "config.json");
  EXPECT_EQ(m->files.at("config.json").read_path, "config.json");
  std::map<std::string, std::string> sha;
  for (const auto& f : m->manifest.files) sha[f.path] = f.sha256;
  EXPECT_EQ(sha.at("alias.json"), sha.at("config.json"));
}

TEST_F(ManifestTest, EachBoundOnAPeersManifestIsCheckedWithAClearError) {
  const Json good = Built();
  ManifestLimits limits;
  EXPECT_TRUE(ParseManifest(good, limits).ok());
  auto refused = [&](ManifestLimits l, const std::string& why) {
    auto r = ParseManifest(good, l);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  ManifestLimits l = limits;
  l.files = 3;
  refused(l, "files (at most 3)");
  l = limits;
  l.chunks = 2;
  refused(l, "chunks (at most 2)");
  l = limits;
  l.tensors = 1;
  refused(l, "tensors (at most 1)");
  l = limits;
  l.sources = 0;
  refused(l, "sources (at most 0)");
  l = limits;
  l.dims = 1;
  refused(l, "dimensions (at most 1)");
  l = limits;
  l.name_bytes = 3;
  refused(l, "longer than 3 bytes");
}

TEST_F(ManifestTest, PathsUnderTheNamesSeeddKeepsForItselfAreRefused) {
  const Json good = Built();
  for (const char* path : {".seedd-journal", "sub/.seedd-record.json", ".seedd-x/a.bin"}) {
    Json j = good;
    j["files"][0]["path"] = path;
    for (auto& c : j["chunks"]) {
      if (c["file"] == good["files"][0]["path"]) c["file"] = path;
    }
    EXPECT_NE(Error(Reseal(j)).find("uses a name seedd keeps for itself"), std::string::npos)
        << path << ": " << Error(Reseal(j));
  }
  // Such files in a model directory are seedd's own and are not served.
  std::ofstream(model_ / ".seedd-journal") << "x";
  const Json built = Built();
  for (const auto& f : built["files"]) EXPECT_NE(f["path"], ".seedd-journal");
}

TEST_F(ManifestTest, ADirectoryWithoutFilesIsNotAModel) {
  std::filesystem::create_directories(dir_.path() / "empty" / "sub");
  auto m = BuildManifest("tiny", dir_.path() / "empty", options_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("holds no files"), std::string::npos) << m.status().message();
  // A manifest without files is refused by a target, whatever its digest says.
  Json j = Built();
  j["files"] = Json::array();
  j["chunks"] = Json::array();
  j["tensors"] = Json::array();
  j["total_size"] = 0;
  EXPECT_NE(Error(Reseal(j)).find("no files"), std::string::npos) << Error(Reseal(j));
}

TEST_F(ManifestTest, RejectsHostileManifestsBeforeAnyWrite) {
  const Json good = Built();
  Json j = good;
  j["files"][0]["path"] = "../../etc/cron.d/evil";
  EXPECT_NE(Error(Reseal(j)).find("'.' or '..' component"), std::string::npos) << Error(Reseal(j));
  j = good;
  j["files"][0]["path"] = "/etc/passwd";
  EXPECT_NE(Error(Reseal(j)).find("absolute"), std::string::npos);
  j = good;
  j["chunks"][2]["offset"] = j["chunks"][2]["offset"].get<uint64_t>() + 1;  // overlap/gap
  EXPECT_NE(Error(Reseal(j)).find("do not tile it"), std::string::npos) << Error(Reseal(j));
  j = good;
  j["chunks"].erase(j["chunks"].size() - 1);  // a file no longer fully covered
  EXPECT_NE(Error(Reseal(j)).find("cover"), std::string::npos) << Error(Reseal(j));
  j = good;
  j["chunks"][1]["length"] = 1ull << 40;  // out of range
  EXPECT_NE(Error(Reseal(j)).find("bad length"), std::string::npos);
  j = good;
  j["total_size"] = j["total_size"].get<uint64_t>() + 1;
  EXPECT_NE(Error(Reseal(j)).find("add up"), std::string::npos);
  j = good;
  j["tensors"][0]["end"] = 1ull << 40;
  EXPECT_NE(Error(Reseal(j)).find("outside its file"), std::string::npos);
  j = good;
  j["files"].push_back({{"path", "config.json/inner"}, {"size", 0}, {"sha256", Sha256Hex("")}});
  j["total_size"] = j["total_size"];
  EXPECT_NE(Error(Reseal(j)).find("both a file and a directory"), std::string::npos)
      << Error(Reseal(j));
  j = good;
  j["files"][1]["sha256"] = "abc";
  EXPECT_NE(Error(Reseal(j)).find("bad sha256"), std::string::npos);
  j = good;
  j["chunks"][0]["xxh3"] = "00";
  EXPECT_NE(Error(Reseal(j)).find("bad xxh3"), std::string::npos);
  j = good;
  j["chunks"][0]["xxh3"] = std::string(32, 'f');  // tampered without resealing
  EXPECT_EQ(Error(j), "manifest: root digest does not match the manifest");
  j = good;
  j["sources"] = Json::array({"peer-7:7420", "[::1]:7420"});  // where to fetch is not sealed
  EXPECT_EQ(Error(j), "accepted");
  j["sources"] = Json::array({"not an address"});
  EXPECT_EQ(Error(j), "manifest: a source is not HOST:PORT");
}

TEST(ValidateRelativePath, AcceptsNestedNamesOnly) {
  EXPECT_TRUE(ValidateRelativePath("a/b/c.safetensors").ok());
  for (const char* bad : {"", "/a", "a/../b", "./a", "a//b", "a/", "a\\b", "..", "."}) {
    EXPECT_FALSE(ValidateRelativePath(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateRelativePath(std::string("a\0b", 3)).ok());
}

TEST(Manifest, ASparseShardWithOffsetsBeyondFourGibibytes) {
  testing::TempDir dir;
  // One U8 tensor of 5 GiB: its end offset needs 64 bits. The file is sparse.
  const uint64_t bytes = 5ull << 30;
  std::string header =
      Json{{"big", {{"dtype", "U8"}, {"shape", {bytes}}, {"data_offsets", {0, bytes}}}}}.dump();
  const auto path = dir.path() / "m" / "big.safetensors";
  std::filesystem::create_directories(path.parent_path());
  {
    std::ofstream out(path, std::ios::binary);
    out << Prefix(header, header.size());
  }
  std::filesystem::resize_file(path, 8 + header.size() + bytes);
  auto h = ReadSafetensorsHeader(path.string());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tensors[0].end, 8 + header.size() + bytes);
  BuildOptions o;
  o.chunk_size = 256ull << 20;
  auto m = BuildManifest("sparse", dir.path() / "m", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunks.back().offset + m->chunks.back().length, 8 + header.size() + bytes);
  EXPECT_TRUE(ParseManifest(m->ToJson()).ok());
}

// Without a chunk size a model is cut into about 1,024 chunks, a power of two
// from 256 KiB to 64 MiB: a swarm's start and end cost a few chunk times each.
TEST(Manifest, WithoutAChunkSizeAModelIsCutIntoAboutAThousandChunks) {
  EXPECT_EQ(AutoChunkBytes(1), 256u << 10);            // the floor
  EXPECT_EQ(AutoChunkBytes(64ull << 20), 256u << 10);  // 256 chunks: the floor
  EXPECT_EQ(AutoChunkBytes(1ull << 30), 1u << 20);
  EXPECT_EQ(AutoChunkBytes((1ull << 30) + 1), 2u << 20);
  EXPECT_EQ(AutoChunkBytes(16ull << 30), 16u << 20);
  EXPECT_EQ(AutoChunkBytes(1ull << 40), 64u << 20);  // the ceiling: 16,384 chunks
  testing::TempDir dir;
  const auto model = dir.path() / "m";
  std::filesystem::create_directories(model);
  std::ofstream(model / "config.json") << "{}";
  { std::ofstream(model / "weights.bin") << "w"; }
  std::filesystem::resize_file(model / "weights.bin", 300ull << 20);  // sparse
  auto m = BuildManifest("auto", model, BuildOptions{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunk_size, 512u << 10);  // 300 MiB / 1,024 rounded up to a power of two
  EXPECT_EQ(m->chunks.size(), 1u + 600u);
  EXPECT_EQ(m->chunks[1].length, 512u << 10);
  BuildOptions fixed;
  fixed.chunk_size = 1 << 20;
  auto f = BuildManifest("auto", model, fixed);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->chunk_size, 1u << 20);  // a size given is kept
  EXPECT_NE(f->root_digest, m->root_digest);
}

// Relays are not trusted to be honest: a manifest built without a choice names
// SHA-256, whose chunks a relay cannot forge (XXH3-128 collisions can be made).
TEST(Manifest, NewManifestsDigestChunksWithSha256ByDefault) {
  testing::TempDir dir;
  const auto model = dir.path() / "m";
  std::filesystem::create_directories(model);
  std::ofstream(model / "config.json") << R"({"hidden_size": 64})";
  auto m = BuildManifest("m", model, BuildOptions{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunk_digest, ChunkDigest::kSha256);
  EXPECT_EQ(m->ToJson()["chunk_digest"], "sha256");
  EXPECT_EQ(m->chunks[0].digest, Sha256Hex(R"({"hidden_size": 64})"));
  EXPECT_EQ(DaemonOptions{}.weight_chunk_digest, "sha256");
}

TEST(DataPlaneRecords, EncodeAndDecodeBigEndianFields) {
  const RequestRecord req = EncodeRequest(kClaimMagic, 0x01020304);
  EXPECT_EQ(std::string(req.data(), req.size()), std::string("SDRN\x01\x02\x03\x04", 8));
  EXPECT_EQ(RequestIndex(req), 0x01020304u);
  const uint64_t length = (5ull << 30) + 7;  // beyond 32 bits
  const HeaderRecord h = EncodeHeader(kChunkMagic, 9, kChunkClaimed, 0xffffffff, length);
  EXPECT_EQ(std::string(h.data(), 8), std::string("SDCH\0\0\0\x09", 8));
  const Header d = DecodeHeader(h);
  EXPECT_EQ(d.magic, kChunkMagic);
  EXPECT_EQ(d.index, 9u);
  EXPECT_EQ(d.status, kChunkClaimed);
  EXPECT_EQ(d.aux, 0xffffffffu);
  EXPECT_EQ(d.length, length);
}

TEST(ChunkHasher, AnySplitGivesTheDigestOfTheWholeInEitherAlgorithm) {
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (ChunkDigest algo : {ChunkDigest::kXxh3, ChunkDigest::kSha256}) {
    const std::string whole = ChunkDigestHex(algo, data);
    for (size_t piece : {size_t{1}, size_t{63}, size_t{4096}, size_t{256 * 1024}, data.size()}) {
      ChunkHasher s(algo);
      for (size_t off = 0; off < data.size(); off += piece) {
        s.Update(std::string_view(data).substr(off, piece));
      }
      EXPECT_EQ(s.HexDigest(), whole) << piece;
      EXPECT_EQ(s.HexDigest(), whole) << "asking twice changes nothing";
      s.Reset();
      EXPECT_EQ(s.HexDigest(), ChunkDigestHex(algo, ""));
    }
    ChunkHasher empty(algo);
    EXPECT_EQ(empty.HexDigest(), ChunkDigestHex(algo, ""));
    EXPECT_NE(whole, ChunkDigestHex(algo, data.substr(1)));
  }
  EXPECT_EQ(ChunkDigestHex(ChunkDigest::kXxh3, data), Xxh3Hex(data));
  EXPECT_EQ(ChunkDigestHex(ChunkDigest::kSha256, data), Sha256Hex(data));
}

// A version's identity is its content: the same files under two model names
// (and a manifest made without saying the chunk size, as seedctl manifest
// does) have one root digest, and it survives the wire.
TEST_F(ManifestTest, TheRootDigestIsTheContentWhateverTheModelIsCalled) {
  BuildOptions auto_chunks;  // chunk size and digest as seedd and seedctl default them
  auto a = BuildManifest("model", model_, auto_chunks);
  auto b = BuildManifest("llama", model_, auto_chunks);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->root_digest, b->root_digest);
  EXPECT_EQ(a->ToJson()["format"], 2);
  auto parsed = ParseManifest(b->ToJson());
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->model, "llama");
  EXPECT_EQ(parsed->root_digest, a->root_digest);
  std::ofstream(model_ / "config.json") << R"({"hidden_size": 65})";
  auto changed = BuildManifest("llama", model_, auto_chunks);
  ASSERT_OK(changed);
  EXPECT_NE(changed->root_digest, a->root_digest);
}

// A manifest of format 1 (no "format": its digest covered the model name) is
// still read, and served on with the digest it had; a format from the future
// is refused, saying which ones this seedd reads.
TEST_F(ManifestTest, AFormatOneManifestIsReadAndServedOnUnchanged) {
  Json v1 = Built();
  v1.erase("format");
  v1.erase("root_digest");
  // The format-1 digest: everything but root_digest, sources and signatures.
  Json covered = v1;
  covered.erase("sources");
  v1["root_digest"] = Sha256Hex(DumpJson(covered));
  auto parsed = ParseManifest(v1);
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->format, 1);
  EXPECT_EQ(parsed->root_digest, v1["root_digest"]);
  EXPECT_EQ(parsed->ToJson(), v1);
  Json renamed = v1;
  renamed["model"] = "other";
  EXPECT_EQ(Error(renamed), "manifest: root digest does not match the manifest");
  Json future = Built();
  future["format"] = 3;
  EXPECT_EQ(Error(Reseal(future)),
            "manifest: format 3 is not one this seedd reads (1 and 2): upgrade seedd on this host");
}

// A pull says how it is doing at info every 10 s: bytes in binary units, the
// share, the rate of this run's bytes, the sources and the time left.
TEST(ProgressLogTest, APullIsLoggedEveryTenSecondsInUnitsPeopleRead) {
  testing::LogCapture logs;
  const auto t0 = ProgressLog::Clock::now();
  ProgressLog log("llama", uint64_t{4} << 30, t0);
  log.Update(uint64_t{1} << 30, 0, 2, t0 + std::chrono::seconds(5));
  EXPECT_TRUE(logs.lines().empty()) << logs.Dump();
  log.Update(uint64_t{1} << 30, 0, 3, t0 + std::chrono::seconds(10));
  EXPECT_TRUE(logs.Contains(spdlog::level::info,
                            "Pulling model llama: 1.00 GiB of 4.00 GiB (25%), 102 MiB/s, 3 "
                            "source(s), ETA 30 s"))
      << logs.Dump();
  log.Update(uint64_t{2} << 30, 0, 3, t0 + std::chrono::seconds(15));
  EXPECT_EQ(logs.lines().size(), 1u) << logs.Dump();
}

}  // namespace
}  // namespace seedd
