// OCI references, registry challenges, artifact manifests and credential files,
// as the registry origin reads them (origins/oci.h).
#include "origins/oci.h"

#include <gtest/gtest.h>

#include "common/crypto.h"

namespace seedd {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

TEST(OciReference, ParsesTagsDigestsPortsAndTheLoopbackDefaultOfPlainHttp) {
  auto r = ParseOciReference("oci://registry.example.com/org/model:v1.2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry, "registry.example.com");
  EXPECT_EQ(r->repository, "org/model");
  EXPECT_EQ(r->tag, "v1.2");
  EXPECT_FALSE(r->plain_http);
  EXPECT_EQ(r->ToString(), "oci://registry.example.com/org/model:v1.2");

  r = ParseOciReference("oci://127.0.0.1:5000/a/b/c@" + kDigest);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry, "127.0.0.1:5000");
  EXPECT_EQ(r->repository, "a/b/c");
  EXPECT_EQ(r->digest, kDigest);
  EXPECT_TRUE(r->tag.empty());
  EXPECT_TRUE(r->plain_http);  // a loopback registry, as Docker treats it

  r = ParseOciReference("oci://localhost:5000/m");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tag, "latest");
  EXPECT_TRUE(r->plain_http);
  r = ParseOciReference("oci://localhost:5000/m?plain-http=false");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->plain_http);
  r = ParseOciReference("oci://10.0.0.5:5000/m:v1?plain-http=true");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plain_http);
  r = ParseOciReference("oci://[::1]:5000/my_org/my-model__x:v1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry, "[::1]:5000");
  EXPECT_TRUE(r->plain_http);
}

TEST(OciReference, RefusesMalformedReferencesSayingWhatIsWrong) {
  const std::pair<std::string, std::string> bad[] = {
      {"s3://bucket/x", "not an oci:// URL"},
      {"oci://registry", "no repository"},
      {"oci://registry/", "no repository"},
      {"oci://registry/Upper/case:v1", "not a repository"},
      {"oci://registry/a//b:v1", "not a repository"},
      {"oci://registry/../etc:v1", "not a repository"},
      {"oci://registry/m:-v1", "is not a tag"},
      {"oci://registry/m:" + std::string(200, 'x'), "is not a tag"},
      {"oci://registry/m@sha256:abc", "is not sha256:<64 hex>"},
      {"oci://registry/m@md5:" + std::string(32, 'a'), "is not sha256:<64 hex>"},
      {"oci://reg istry/m:v1", "is not a registry host"},
      {"oci://registry:99999/m:v1", "is not a registry host"},
      {"oci://registry:/m:v1", "is not a registry host"},
      {"oci://registry/m:v1?insecure=1", "unknown parameter"},
  };
  for (const auto& [url, why] : bad) {
    auto r = ParseOciReference(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(r.status().message().find(why), std::string::npos)
        << url << ": " << r.status().message();
  }
}

TEST(AuthChallenge, ParsesBearerAndBasicChallengesWithQuotedCommas) {
  auto c = ParseAuthChallenge(
      R"(Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:org/m:pull,push")");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->scheme, "bearer");
  EXPECT_EQ(c->params["realm"], "https://auth.example.com/token");
  EXPECT_EQ(c->params["service"], "registry.example.com");
  EXPECT_EQ(c->params["scope"], "repository:org/m:pull,push");
  c = ParseAuthChallenge(R"(Basic realm="seedd-test")");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->scheme, "basic");
  EXPECT_EQ(c->params["realm"], "seedd-test");
  EXPECT_FALSE(ParseAuthChallenge("").has_value());
  EXPECT_FALSE(ParseAuthChallenge(R"(Bearer realm="unterminated)").has_value());
}

Json Layer(const std::string& path, const std::string& digest = kDigest,
           const std::string& key = "org.cncf.model.filepath",
           const std::string& media = "application/vnd.cncf.model.weight.v1.raw") {
  return {{"mediaType", media}, {"digest", digest}, {"size", 10}, {"annotations", {{key, path}}}};
}

Json Manifest(Json layers) {
  return {{"schemaVersion", 2},
          {"config", {{"mediaType", "application/vnd.cncf.model.config.v1+json"}}},
          {"layers", std::move(layers)}};
}

TEST(OciManifest, NamesEachLayersFileFromModelPackOrTitleAnnotations) {
  const std::string other = "sha256:" + std::string(64, 'b');
  auto files = OciManifestFiles(Manifest(
      {Layer("weights/model.safetensors"),
       Layer("tokenizer.json", other, "org.opencontainers.image.title", "application/json")}));
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, "weights/model.safetensors");
  EXPECT_EQ((*files)[0].digest, kDigest);
  EXPECT_EQ((*files)[0].size, 10u);
  EXPECT_EQ((*files)[1].path, "tokenizer.json");
}

TEST(OciManifest, RefusesLayersWithoutSafePathsOrSha256DigestsAndArchives) {
  const std::pair<Json, std::string> bad[] = {
      {Manifest(Json::array()), "no layers"},
      {Manifest(Json::array({Layer("../escape")})), "path '../escape'"},
      {Manifest(Json::array({Layer("/etc/passwd")})), "path '/etc/passwd'"},
      {Manifest(Json::array({Layer("a", kDigest, "other.annotation")})), "names no file path"},
      {Manifest(Json::array({Layer("a"), Layer("a")})), "named twice"},
      {Manifest(Json::array({Layer("sub/.seedd-journal")})), "keeps for itself"},
      {Manifest(Json::array({Layer("a", "md5:" + std::string(32, 'a'))})), "is not sha256"},
      {Manifest(Json::array({Layer("a", kDigest, "org.cncf.model.filepath",
                                   "application/vnd.cncf.model.weight.v1.tar")})),
       "modctl build --raw"},
      {Json{{"layers", Json::array({Json{{"digest", kDigest}}})}}, "no digest or size"},
  };
  for (const auto& [manifest, why] : bad) {
    auto files = OciManifestFiles(manifest);
    ASSERT_FALSE(files.ok()) << manifest.dump();
    EXPECT_NE(files.status().message().find(why), std::string::npos)
        << manifest.dump() << ": " << files.status().message();
  }
}

TEST(RegistryAuth, ReadsTheEntryForTheRegistryFromALoginFile) {
  const std::string auth = Base64Encode("user:secret");
  const std::string text =
      R"({"auths": {"https://other.io": {"auth": "eDp5"}, "reg.io:5000": {"auth": ")" + auth +
      R"("}}})";
  auto found = RegistryAuthFromJson(text, "reg.io:5000");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->value_or(""), auth);
  found = RegistryAuthFromJson(text, "absent.io");
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  EXPECT_FALSE(RegistryAuthFromJson("not json", "reg.io").ok());
  EXPECT_FALSE(RegistryAuthFromJson(R"({"auths": {"reg.io": {"auth": "!!"}}})", "reg.io").ok());
}

}  // namespace
}  // namespace seedd
