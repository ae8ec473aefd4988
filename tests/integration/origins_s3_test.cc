// Models from an S3-compatible store: a prefix served by a daemon and pulled
// byte for byte, each object checked against its ETag or its SHA-256 checksum
// (s3rver, started by make test; a scripted HTTP server where s3rver lacks what
// S3 does: checksums, ranges ignored, failing multipart uploads), seedctl push
// to S3, and revisions under a new prefix.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/crypto.h"
#include "seedd/origins.h"
#include "support/fake_http.h"
#include "support/origins_fixture.h"
#include "support/servers.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::AModel;
using testing::Has;
using testing::Md5HexOf;
using testing::OriginsTest;
using testing::RandomBytes;
using testing::RunCommand;
using testing::WriteFiles;

// An S3-compatible server (s3rver) holding a model's files below a prefix,
// uploaded with curl as any client would.
class S3OriginTest : public OriginsTest {
 protected:
  void SetUp() override {
    OriginsTest::SetUp();
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }
  void Upload(const std::string& prefix, const std::map<std::string, std::string>& files) {
    for (const auto& [path, bytes] : files) {
      const fs::path tmp = dir_.path() / "upload";
      std::ofstream(tmp, std::ios::binary) << bytes;
      auto r = RunCommand(
          {"/usr/bin/curl", "-sS", "-f", "-X", "PUT", "--data-binary", "@" + tmp.string(),
           s3_.endpoint() + "/" + testing::S3Server::kBucket + "/" + prefix + "/" + path});
      ASSERT_EQ(r.status, 0) << r.err;
    }
  }
  std::string Url(const std::string& prefix) const { return s3_.url(prefix); }
  testing::S3Server s3_;
};

TEST_F(S3OriginTest, APrefixIsServedByADaemonAndPulledByteForByteEachFileCheckedAgainstItsEtag) {
  const auto model = AModel();
  Upload("models/test", model);
  Upload("models/test-other", {{"stray.bin", "not this model"}});
  std::string addr;
  auto origin = StartDaemon({"--model", "m=" + Url("models/test"), "--log-level", "info"}, &addr,
                            dir_.path() / "origin-cache");
  auto pulled = RunCommand(PullArgs(addr, dir_.path() / "into"));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);
  origin->Signal(SIGTERM);
  ASSERT_TRUE(origin->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(origin->Stderr(), "every file matched its upstream digest")) << origin->Stderr();
}

// `--verify upstream=s3://...`: the bucket vouches for the model through its
// objects' ETags (the MD5 of a single-part object): the manifest must name
// exactly the listed objects and sizes, and each file's MD5 is checked before
// commit. A daemon serving other bytes of the same sizes under the model's
// name is refused naming the file and both digests, and nothing is committed.
TEST_F(S3OriginTest, AnS3UpstreamVouchesForThePulledModelThroughItsEtags) {
  const auto model = AModel();
  Upload("models/test", model);
  const std::string upstream = "upstream=" + Url("models/test");
  std::string origin_addr;
  auto origin = StartDaemon({"--model", "m=" + Url("models/test")}, &origin_addr,
                            dir_.path() / "origin-cache");
  auto pulled = RunCommand(PullArgs(origin_addr, dir_.path() / "into", {"--verify", upstream}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  std::map<std::string, std::string> forged;
  std::string liar_addr;
  auto liar = ServeForged(model, &forged, &liar_addr);
  auto refused = RunCommand(PullArgs(liar_addr, dir_.path() / "into-2", {"--verify", upstream}));
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err,
                  "model-00002-of-00002.bin: md5:" + Md5HexOf(forged["model-00002-of-00002.bin"]) +
                      ", the upstream's md5:" + Md5HexOf(model.at("model-00002-of-00002.bin"))))
      << refused.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "into-2"));
  // A file the bucket does not list is refused before any byte moves.
  Upload("models/test-less", {{"config.json", model.at("config.json")}});
  auto fewer = RunCommand(PullArgs(origin_addr, dir_.path() / "into-3",
                                   {"--verify", "upstream=" + Url("models/test-less")}));
  EXPECT_NE(fewer.status, 0);
  EXPECT_TRUE(Has(fewer.err, "which the upstream does not")) << fewer.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "into-3"));
}

TEST_F(S3OriginTest, ALargeObjectIsFetchedAsParallelRangedGetsAndCheckedAgainstItsEtag) {
  const auto model = AModel();
  Upload("models/test", model);
  OriginAccess access;
  access.range_bytes = 1 << 20;
  access.range_streams = 2;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/test"), dir_.path() / "o", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->ranged_gets, 3u);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_EQ(Files(copy->dir), model);
}

// `seedctl push s3://...` writes a model directory as one object per file,
// which `--model NAME=s3://...` and `seedctl pull --from` read back byte for
// byte, each checked; a file over S3's largest object (5 TiB) is refused before
// any byte moves.
TEST_F(S3OriginTest, SeedctlPushWritesADirectoryThatTheS3OriginReadsBack) {
  const auto model = AModel();
  const fs::path dir = dir_.path() / "to-push";
  WriteFiles(dir, model);
  fs::create_directories(dir / ".seedd-staging");
  std::ofstream(dir / ".seedd-staging" / "left-out", std::ios::binary) << "x";
  auto pushed = RunCommand({SEEDCTL_BIN, "push", Url("models/pushed"), "--from", dir.string()});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  EXPECT_TRUE(Has(pushed.out, "pushed " + Url("models/pushed") + " (5 files, 4.19 MiB)"))
      << pushed.out;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/pushed"), dir_.path() / "o", OriginAccess{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_TRUE(Has(pushed.out, copy->version)) << pushed.out;

  // A sparse file of 5 TiB and one byte: refused before any object is written.
  const fs::path big = dir_.path() / "big";
  fs::create_directories(big);
  {
    std::ofstream(big / "a.bin", std::ios::binary) << "a";
    std::ofstream huge(big / "huge.bin", std::ios::binary);
    huge.seekp((std::streamoff{5} << 40));
    huge.put('x');
  }
  auto refused = RunCommand({SEEDCTL_BIN, "push", Url("models/big"), "--from", big.string()});
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err, "huge.bin: 5497558138881 bytes")) << refused.err;
  EXPECT_TRUE(Has(refused.err, "nothing was sent")) << refused.err;
  Result<OriginCopy> none = CopyFromOrigin(Url("models/big"), dir_.path() / "n", OriginAccess{});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
}

// A file larger than the part size goes up as a multipart upload; a multipart
// object's ETag is no MD5 of its bytes on S3 ("<md5 of the parts' md5s>-N",
// written here into s3rver's record of the object, which keeps the MD5), so a
// reader takes the file's SHA-256 from the object's own headers
// (x-amz-meta-sha256) and checks the bytes against it: the object read back
// byte for byte and verified, ranged GETs and all, and the same object with
// its bytes changed refused naming the file, the digest and the expected
// SHA-256; `--verify upstream=` vouches through it. A part size out of S3's
// bounds is refused before anything is sent.
TEST_F(S3OriginTest, AFileLargerThanThePartSizeGoesUpInPartsAndIsVerifiedAgainstItsSha256) {
  auto model = AModel();
  model["model-big.bin"] = RandomBytes(12 << 20, 4);
  const fs::path dir = dir_.path() / "to-push";
  WriteFiles(dir, model);
  auto pushed = RunCommand(
      {SEEDCTL_BIN, "push", Url("models/parts"), "--from", dir.string(), "--part-mib", "5"});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  EXPECT_TRUE(Has(pushed.out, "(6 files, 16.2 MiB; 1 in parts)")) << pushed.out;
  const fs::path object =
      s3_.data_dir() / testing::S3Server::kBucket / "models" / "parts" / "model-big.bin";
  const fs::path md5 = object.string() + "._S3rver_object.md5";
  ASSERT_TRUE(fs::exists(md5)) << md5;
  std::ofstream(md5, std::ios::trunc) << Md5HexOf("parts' md5s") << "-3";
  OriginAccess access;
  access.range_bytes = 4 << 20;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/parts"), dir_.path() / "o", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_EQ(copy->ranged_gets, 3u);  // the 12 MiB file's digest is known before its GET
  // The bucket vouches for a pull from daemons through that SHA-256 too.
  std::string addr;
  auto origin =
      StartDaemon({"--model", "m=" + Url("models/parts")}, &addr, dir_.path() / "origin-cache");
  auto pulled = RunCommand(
      PullArgs(addr, dir_.path() / "into", {"--verify", "upstream=" + Url("models/parts")}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  std::string forged = model["model-big.bin"];
  forged[7 << 20] ^= 1;
  std::ofstream(object.string() + "._S3rver_object", std::ios::binary | std::ios::trunc) << forged;
  Result<OriginCopy> refused = CopyFromOrigin(Url("models/parts"), dir_.path() / "o2", access);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status().ToString();
  EXPECT_TRUE(
      Has(refused.status().message(), "model-big.bin: digest sha256:" + Sha256Hex(forged) +
                                          ", expected sha256:" + Sha256Hex(model["model-big.bin"])))
      << refused.status().ToString();

  auto bad = RunCommand(
      {SEEDCTL_BIN, "push", Url("models/parts-2"), "--from", dir.string(), "--part-mib", "4"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(Has(bad.err, "--part-mib")) << bad.err;
}

TEST_F(S3OriginTest, AnObjectChangedAfterItsEtagWasRecordedIsRefusedNamingTheFile) {
  const auto model = AModel();
  Upload("models/test", model);
  // s3rver keeps an object's bytes beside its MD5: changing the bytes alone
  // makes an object that no longer matches the ETag it lists.
  const fs::path object = s3_.data_dir() / testing::S3Server::kBucket / "models" / "test" /
                          "config.json._S3rver_object";
  ASSERT_TRUE(fs::exists(object)) << object;
  std::ofstream(object, std::ios::binary) << R"({"architectures": ["Evil"]})";
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/test"), dir_.path() / "o", OriginAccess{});
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kDataLoss) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "config.json: digest md5:")) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "expected md5:" + Md5HexOf(model.at("config.json"))))
      << copy.status().ToString();
}

TEST_F(S3OriginTest, AnEmptyPrefixOrAMissingBucketIsNotFoundNamingTheUrl) {
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/none"), dir_.path() / "o", OriginAccess{});
  EXPECT_EQ(copy.status().code(), StatusCode::kNotFound) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "no object below the prefix 'models/none/'"))
      << copy.status().ToString();
  const std::string missing =
      "s3://no-such-bucket/models/test?endpoint=" + s3_.endpoint() + "&region=us-east-1";
  copy = CopyFromOrigin(missing, dir_.path() / "o", OriginAccess{});
  EXPECT_EQ(copy.status().code(), StatusCode::kNotFound) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "NoSuchBucket")) << copy.status().ToString();
}

TEST_F(S3OriginTest, ARevisionUnderANewPrefixFetchesOnlyTheObjectsThatChanged) {
  auto v1 = AModel();
  auto v2 = v1;
  v2["model-00002-of-00002.bin"] = RandomBytes(1 << 20, 9);
  Upload("models/test/v1", v1);
  Upload("models/test/v2", v2);
  const fs::path root = dir_.path() / "origins" / "m";
  ASSERT_TRUE(CopyFromOrigin(Url("models/test/v1"), root, OriginAccess{}).ok());
  Result<OriginCopy> second = CopyFromOrigin(Url("models/test/v2"), root, OriginAccess{});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Files(second->dir), v2);
  EXPECT_EQ(second->bytes_fetched, 1u << 20);
  EXPECT_EQ(second->files_unverified, 0u);
}

// An object uploaded in parts has no MD5 ETag; the x-amz-checksum-sha256 it was
// uploaded with (sent back on a GET with x-amz-checksum-mode) is checked
// instead. s3rver does not store checksums: a scripted HTTP server answers the
// listing and the GET as S3 does.
// An upstream that answers a ranged GET with the whole object (HTTP 200) gets
// one GET instead; nothing of the ignored answer is written.
TEST(S3OriginRanges, AnUpstreamThatIgnoresRangesIsAskedForTheWholeObject) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  const std::string body = RandomBytes(300000, 8);
  const std::string listing =
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated><Contents>"
      "<Key>m/w.bin</Key><Size>300000</Size><ETag>&quot;" +
      Md5HexOf(body) + "&quot;</ETag></Contents></ListBucketResult>";
  testing::FakeHttpServer s3({testing::FakeHttpServer::Response(200, "OK", listing),
                              testing::FakeHttpServer::Response(200, "OK", body)});
  testing::TempDir dir;
  OriginAccess access;
  access.range_bytes = 100000;
  access.range_streams = 1;
  Result<OriginCopy> copy =
      CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "a", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->ranged_gets, 0u);
  EXPECT_EQ(testing::ReadAll(copy->dir / "w.bin"), body);
  EXPECT_EQ(s3.requests(), 3);  // the listing, the ignored range, the whole GET
}

// A model of one file, w.bin, of `mib` MiB pushed in parts of 5 MiB to a
// scripted S3 server answering `answers` (the first: the upload's start, with
// UploadId `id`).
Result<OriginPush> PushInParts(const testing::TempDir& dir, int mib, const std::string& id,
                               std::vector<std::string> answers,
                               std::unique_ptr<testing::FakeHttpServer>* s3) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  WriteFiles(dir.path() / "model", {{"w.bin", RandomBytes(static_cast<size_t>(mib) << 20, 9)}});
  answers.insert(answers.begin(),
                 testing::FakeHttpServer::Response(
                     200, "OK",
                     "<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>bucket</Bucket>"
                     "<Key>m/w.bin</Key><UploadId>" +
                         id + "</UploadId></InitiateMultipartUploadResult>"));
  *s3 = std::make_unique<testing::FakeHttpServer>(std::move(answers));
  OriginAccess access;
  access.push_part_bytes = 5 << 20;
  return PushToRegistry("s3://bucket/m?endpoint=" + (*s3)->endpoint(), dir.path() / "model", access,
                        nullptr);
}

// A multipart upload whose part fails is aborted (S3 bills the parts of an
// upload until it completes or is aborted): s3rver does not implement the
// abort, so a scripted server answers as S3 does and fails part 2.
TEST(S3OriginPush, AMultipartUploadWhosePartFailsIsAbortedAndThePushFailsNamingThePart) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(
      dir, 12, "up-42",
      {"HTTP/1.1 200 OK\r\nETag: \"part-1\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
       testing::FakeHttpServer::Response(500, "Internal Server Error",
                                         "<Error><Code>InternalError</Code></Error>"),
       "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
      &s3);
  ASSERT_FALSE(push.ok());
  EXPECT_TRUE(Has(push.status().ToString(), "part 2 of w.bin")) << push.status().ToString();
  const std::vector<std::string> lines = s3->request_lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(Has(lines[0], "POST ") && Has(lines[0], "uploads")) << lines[0];
  EXPECT_TRUE(Has(lines[1], "PUT ") && Has(lines[1], "partNumber=1")) << lines[1];
  EXPECT_TRUE(Has(lines[2], "PUT ") && Has(lines[2], "partNumber=2")) << lines[2];
  EXPECT_TRUE(Has(lines[3], "DELETE ") && Has(lines[3], "uploadId=up-42") &&
              !Has(lines[3], "partNumber"))
      << lines[3];
  EXPECT_FALSE(Has(push.status().ToString(), "not aborted")) << push.status().ToString();
}

// An UploadId too long to put in URLs and errors is refused before any part
// is sent.
TEST(S3OriginPush, AnUploadIdOverItsBoundIsRefusedBeforeAnyPart) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(dir, 11, std::string(5000, 'u'), {}, &s3);
  ASSERT_FALSE(push.ok());
  EXPECT_TRUE(Has(push.status().ToString(), "an UploadId of 5000 bytes (at most 1024)"))
      << push.status().ToString();
  EXPECT_EQ(s3->requests(), 1);
}

// An upload the store would not abort is named, with what the store answered,
// for its owner to abort (its parts are billed until then).
TEST(S3OriginPush, AMultipartUploadThatCouldNotBeAbortedIsNamedInTheError) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(
      dir, 11, "up-7",
      {testing::FakeHttpServer::Response(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>"),
       testing::FakeHttpServer::Response(405, "Method Not Allowed",
                                         "<Error><Code>MethodNotAllowed</Code></Error>")},
      &s3);
  ASSERT_FALSE(push.ok());
  const std::string error = push.status().ToString();
  EXPECT_TRUE(Has(error, "the multipart upload up-7 of w.bin was not aborted")) << error;
  EXPECT_TRUE(Has(error, "HTTP 405")) << error;
  EXPECT_TRUE(Has(error, "part 1 of w.bin")) << error;
  EXPECT_EQ(s3->requests(), 3);
}

TEST(S3OriginChecksums, AMultipartObjectIsCheckedAgainstItsSha256ChecksumAndRefusedWhenItDiffers) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  const std::string body = RandomBytes(100000, 7);
  auto answers = [&](const std::string& checksum_of) {
    const std::string listing =
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated><Contents>"
        "<Key>m/w.bin</Key><Size>100000</Size><ETag>&quot;0123456789abcdef0123456789abcdef-2"
        "&quot;</ETag></Contents></ListBucketResult>";
    std::string sha;
    const std::string hex = Sha256Hex(checksum_of);
    for (size_t i = 0; i < hex.size(); i += 2) {
      sha += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    return std::vector<std::string>{
        testing::FakeHttpServer::Response(200, "OK", listing),
        "HTTP/1.1 200 OK\r\nx-amz-checksum-sha256: " + Base64Encode(sha) +
            "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body};
  };
  testing::TempDir dir;
  {
    testing::FakeHttpServer s3(answers(body));
    Result<OriginCopy> copy =
        CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "a", OriginAccess{});
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    EXPECT_EQ(copy->files_unverified, 0u);
    EXPECT_EQ(testing::ReadAll(copy->dir / "w.bin"), body);
  }
  {
    testing::FakeHttpServer s3(answers("other bytes"));
    Result<OriginCopy> copy =
        CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "b", OriginAccess{});
    ASSERT_FALSE(copy.ok());
    EXPECT_EQ(copy.status().code(), StatusCode::kDataLoss) << copy.status().ToString();
    EXPECT_TRUE(Has(copy.status().message(), "w.bin: digest sha256:" + Sha256Hex(body)))
        << copy.status().ToString();
  }
}

}  // namespace
}  // namespace seedd
