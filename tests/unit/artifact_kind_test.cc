#include "seedd/artifact_kind.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/crypto.h"
#include "seedd/json_text.h"
#include "support/test_util.h"
#include "transport/handler.h"

namespace seedd {
namespace {

const char kHash[] = "0123456789abcdef";

Json KeyFields(const std::string& file = "kernels.bin") {
  return Json{{"namespace", "triton"}, {"config_hash", kHash}, {"filename", file}};
}

Json Payload(const std::string& data, const std::string& file = "kernels.bin") {
  return Json{{"filename", file},
              {"size", data.size()},
              {"sha256", Sha256Hex(data)},
              {"data", Base64Encode(data)}};
}

std::string ResolveError(const Seedable& s, const Json& request) {
  auto r = s.Resolve(request);
  return r.ok() ? "" : r.status().message();
}

TEST(ArtifactSeedable, ResolvesAStoredFileToAVerifiablePayload) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "triton" / kHash);
  std::ofstream(dir.path() / "triton" / kHash / "kernels.bin") << "compiled kernels";
  auto seedable = NewArtifactSeedable(dir.path());
  EXPECT_EQ(seedable->kind(), "artifact");
  auto r = seedable->Resolve(KeyFields());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, Payload("compiled kernels"));
  auto miss = seedable->Resolve(KeyFields("other.bin"));
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
}

TEST(ArtifactSeedable, ValidatesTheWireKeyBeforeTouchingTheStore) {
  auto seedable = NewArtifactSeedable(NewMemoryArtifactStore());
  Json k = KeyFields();
  k.erase("namespace");
  EXPECT_EQ(ResolveError(*seedable, k), "missing field 'namespace'");
  k = KeyFields();
  k["config_hash"] = "ABCDEF0123456789";
  EXPECT_EQ(ResolveError(*seedable, k), "invalid config_hash");
  k["config_hash"] = "../../etc/passwd";
  EXPECT_EQ(ResolveError(*seedable, k), "invalid config_hash");
  k["config_hash"] = std::string(129, 'a');
  EXPECT_EQ(ResolveError(*seedable, k), "invalid config_hash");
  k["config_hash"] = 12345;
  EXPECT_EQ(ResolveError(*seedable, k), "field 'config_hash' must be a string");
  k = KeyFields("..");
  EXPECT_EQ(ResolveError(*seedable, k), "invalid filename (expected [A-Za-z0-9_.-]{1,255})");
  k = KeyFields("a/b");
  EXPECT_EQ(ResolveError(*seedable, k), "invalid filename (expected [A-Za-z0-9_.-]{1,255})");
  k = KeyFields();
  k["namespace"] = "Upper";
  EXPECT_EQ(ResolveError(*seedable, k), "invalid namespace (expected [a-z0-9_.-]{1,64})");
  k["namespace"] = std::string(65, 'a');
  EXPECT_EQ(ResolveError(*seedable, k), "invalid namespace (expected [a-z0-9_.-]{1,64})");
}

TEST(ArtifactSeedable, RejectsPayloadsThatDoNotVerify) {
  auto seedable = NewArtifactSeedable(NewMemoryArtifactStore());
  EXPECT_TRUE(seedable->ValidatePayload(Payload("data")).ok());
  auto reason = [&](const Json& p) {
    auto r = seedable->ValidatePayload(p);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_EQ(reason(Json::array()), "artifact payload must be an object");
  Json p = Payload("data");
  p["sha256"] = Sha256Hex("other");
  EXPECT_EQ(reason(p), "sha256 mismatch");
  p = Payload("data");
  p["size"] = 5;
  EXPECT_EQ(reason(p), "size mismatch: payload says 5 bytes, data has 4");
  p = Payload("data");
  p["size"] = -1;
  EXPECT_EQ(reason(p), "field 'size' must be an integer from 0 to 16 MiB");
  p["size"] = kMaxArtifactBytes + 1;
  EXPECT_EQ(reason(p), "field 'size' must be an integer from 0 to 16 MiB");
  p = Payload("data");
  p["data"] = "!!!!";
  EXPECT_EQ(reason(p), "field 'data' is not valid base64");
  p = Payload("data");
  p.erase("sha256");
  EXPECT_EQ(reason(p), "missing field 'sha256'");
  p = Payload("data", "../evil");
  EXPECT_EQ(reason(p), "invalid filename in payload");
}

TEST(ArtifactSeedable, InstallWritesTheRequestedKeyAndRefusesAnotherFile) {
  testing::TempDir dir;
  auto seedable = NewArtifactSeedable(dir.path());
  ASSERT_TRUE(seedable->Install(KeyFields(), Payload("bytes")).ok());
  std::ifstream in(dir.path() / "triton" / kHash / "kernels.bin");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "bytes");
  Status s = seedable->Install(KeyFields(), Payload("bytes", "other.bin"));
  EXPECT_EQ(s.message(), "payload is for 'other.bin', not the requested 'kernels.bin'");
}

// Answered on the listener's thread, an artifact's answer is kept and given
// again while its bytes are unchanged; bytes written in place (same size, same
// name) or a new value are read and answered anew.
TEST(ArtifactSeedable, AKeptAnswerIsMadeAgainWhenTheBytesChange) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "triton" / kHash);
  const auto file = dir.path() / "triton" / kHash / "kernels.bin";
  std::ofstream(file) << "compiled kernels v1";
  auto seedable = NewArtifactSeedable(dir.path());
  auto now = [&] {
    Result<std::optional<std::string>> text = std::optional<std::string>();
    EXPECT_TRUE(seedable->ResolveTextNow(KeyFields(), &text));
    EXPECT_TRUE(text.ok() && text->has_value());
    return text.ok() && text->has_value() ? ParseJson(**text).value() : Json();
  };
  EXPECT_EQ(now(), Payload("compiled kernels v1"));
  EXPECT_EQ(now(), Payload("compiled kernels v1"));  // the kept answer
  { std::ofstream(file, std::ios::in | std::ios::out) << "compiled kernels v2"; }
  EXPECT_EQ(now(), Payload("compiled kernels v2"));
  ASSERT_TRUE(seedable->Install(KeyFields(), Payload("new kernels")).ok());
  EXPECT_EQ(now(), Payload("new kernels"));
  std::filesystem::remove(file);
  Result<std::optional<std::string>> text = std::optional<std::string>("stale");
  ASSERT_TRUE(seedable->ResolveTextNow(KeyFields(), &text));
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->has_value());
}

TEST(ArtifactSeedable, ResolveRefusesFilesOverSixteenMebibytes) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "triton" / kHash);
  const auto big = dir.path() / "triton" / kHash / "big.bin";
  std::ofstream(big).close();
  std::filesystem::resize_file(big, kMaxArtifactBytes + 1);
  auto seedable = NewArtifactSeedable(dir.path());
  EXPECT_NE(ResolveError(*seedable, KeyFields("big.bin")).find("over the limit"),
            std::string::npos);
}

// RequestHandler: dispatch and authentication without sockets.
class RequestHandlerTest : public ::testing::Test {
 protected:
  RequestHandlerTest() : handler_({MakeSeedable()}, "s3cret") {}
  static SeedablePtr MakeSeedable() {
    auto store = NewMemoryArtifactStore();
    (void)store->Put(*ArtifactKey::Make("triton", kHash, "kernels.bin"), "bytes");
    return NewArtifactSeedable(std::move(store));
  }
  Json Request(Json fields) {
    fields["kind"] = "artifact";
    return fields;
  }
  RequestHandler handler_;
};

TEST_F(RequestHandlerTest, AnswersOkMissAndErrors) {
  Json ok = handler_.Handle(Request(KeyFields()));
  EXPECT_EQ(ok["status"], "ok");
  EXPECT_EQ(ok["payload"], Payload("bytes"));
  EXPECT_EQ(handler_.Handle(Request(KeyFields("nope"))), Json({{"status", "miss"}}));
  Json bad = KeyFields();
  bad["config_hash"] = "xyz";
  EXPECT_EQ(handler_.Handle(Request(bad)), ErrorResponse("invalid config_hash"));
}

TEST_F(RequestHandlerTest, UnknownMissingOrNonStringKindIsUnsupported) {
  const Json unsupported = ErrorResponse("unsupported seed kind");
  EXPECT_EQ(handler_.Handle(Json{{"kind", "weights"}}), unsupported);
  EXPECT_EQ(handler_.Handle(Json::object()), unsupported);
  EXPECT_EQ(handler_.Handle(Json{{"kind", 7}}), unsupported);
  EXPECT_EQ(handler_.Handle(Json::array({1, 2})), unsupported);
  EXPECT_EQ(handler_.Handle(Json("artifact")), unsupported);
}

TEST_F(RequestHandlerTest, AuthenticatesOnlyAStringTokenEqualToOurs) {
  EXPECT_TRUE(handler_.Authenticate(Json{{"token", "s3cret"}}));
  EXPECT_FALSE(handler_.Authenticate(Json{{"token", "wrong"}}));
  EXPECT_FALSE(handler_.Authenticate(Json{{"token", "s3cret2"}}));
  EXPECT_FALSE(handler_.Authenticate(Json::object()));
  EXPECT_FALSE(handler_.Authenticate(Json{{"token", 123}}));
  EXPECT_FALSE(handler_.Authenticate(Json{{"token", Json::array({"s3cret"})}}));
  EXPECT_FALSE(handler_.Authenticate(Json::array({"s3cret"})));
  RequestHandler no_token({}, "");
  EXPECT_FALSE(no_token.Authenticate(Json{{"token", ""}}));
}

TEST_F(RequestHandlerTest, FrameBodyIsParsedThenAuthenticatedThenHandled) {
  EXPECT_EQ(handler_.HandleFrameBody("not json"), ErrorResponse("Invalid request: not valid JSON"));
  EXPECT_EQ(handler_.HandleFrameBody("[1]"), ErrorResponse("Unauthorized request"));
  Json req = Request(KeyFields());
  EXPECT_EQ(handler_.HandleFrameBody(req.dump()), ErrorResponse("Unauthorized request"));
  req["token"] = "s3cret";
  EXPECT_EQ(handler_.HandleFrameBody(req.dump())["status"], "ok");
}

}  // namespace
}  // namespace seedd
