// Ed25519 signatures (seedd/signing.h) and where they are checked: a manifest's
// root digest and a compile cache bundle's digest. Keys are made by the openssl
// CLI, as an operator makes them.
#include "seedd/signing.h"

#include <gtest/gtest.h>

#include "common/crypto.h"
#include "seedd/compile_cache.h"
#include "seedd/weights.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using testing::TempDir;

class SigningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(testing::MakeSigningKeys(dir_.path(), {"publisher", "stranger"}, &error)) << error;
    publisher_ = *SigningKey::Load(dir_.path() / "publisher.pem");
    stranger_ = *SigningKey::Load(dir_.path() / "stranger.pem");
    trust_ = *TrustedKeys::Load({dir_.path() / "publisher.pub.pem"});
  }
  TempDir dir_;
  std::shared_ptr<const SigningKey> publisher_, stranger_;
  std::shared_ptr<const TrustedKeys> trust_;
};

TEST_F(SigningTest, AKeysFingerprintIsTheSameFromItsPrivateAndPublicFiles) {
  Result<std::string> from_public = KeyFingerprint(dir_.path() / "publisher.pub.pem");
  ASSERT_TRUE(from_public.ok()) << from_public.status().message();
  EXPECT_EQ(*from_public, publisher_->fingerprint());
  EXPECT_EQ(from_public->rfind("ed25519:", 0), 0u);
  EXPECT_EQ(from_public->size(), 8u + 32u);
  EXPECT_NE(publisher_->fingerprint(), stranger_->fingerprint());
  EXPECT_EQ(trust_->Describe(), publisher_->fingerprint());
}

TEST_F(SigningTest, ASignatureByATrustedKeyVerifiesAndNothingElseDoes) {
  const std::string digest(64, 'a');
  const Signature good = publisher_->Sign(kManifestPurpose, digest);
  EXPECT_TRUE(trust_->Check({good}, kManifestPurpose, digest, "x").ok());
  // Another digest, another purpose: the same signature does not carry over.
  Status other_digest = trust_->Check({good}, kManifestPurpose, std::string(64, 'b'), "x");
  EXPECT_EQ(other_digest.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_digest.message().find("does not verify"), std::string::npos);
  EXPECT_FALSE(trust_->Check({good}, kBundlePurpose, digest, "x").ok());
  // Unsigned, or signed by a key not trusted: the error names the keys.
  Status unsigned_doc = trust_->Check({}, kManifestPurpose, digest, "the thing");
  EXPECT_EQ(unsigned_doc.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(unsigned_doc.message().find("the thing is not signed"), std::string::npos);
  EXPECT_NE(unsigned_doc.message().find(publisher_->fingerprint()), std::string::npos);
  Status stranger =
      trust_->Check({stranger_->Sign(kManifestPurpose, digest)}, kManifestPurpose, digest, "x");
  EXPECT_EQ(stranger.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(stranger.message().find("signed by " + stranger_->fingerprint()), std::string::npos)
      << stranger.message();
  // A forged signature claiming the trusted key's name.
  Signature forged = stranger_->Sign(kManifestPurpose, digest);
  forged.key = publisher_->fingerprint();
  EXPECT_FALSE(trust_->Check({forged}, kManifestPurpose, digest, "x").ok());
  // One good signature among others is enough.
  EXPECT_TRUE(
      trust_
          ->Check({stranger_->Sign(kManifestPurpose, digest), good}, kManifestPurpose, digest, "x")
          .ok());
}

TEST_F(SigningTest, KeyFilesThatAreNotEd25519AreRefusedNamingTheFile) {
  std::string error;
  ASSERT_TRUE(testing::MakeTestPki(dir_.path() / "pki", &error)) << error;
  Result<std::shared_ptr<const SigningKey>> ec = SigningKey::Load(dir_.path() / "pki/server.key");
  ASSERT_FALSE(ec.ok());
  EXPECT_NE(ec.status().message().find("not an Ed25519 key"), std::string::npos);
  EXPECT_NE(ec.status().message().find("server.key"), std::string::npos);
  // A public key cannot sign.
  EXPECT_FALSE(SigningKey::Load(dir_.path() / "publisher.pub.pem").ok());
  Result<std::shared_ptr<const TrustedKeys>> missing = TrustedKeys::Load({dir_.path() / "nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot be read"), std::string::npos);
}

TEST_F(SigningTest, SignaturesOfAPeerAreBoundedAndCheckedForShapeBeforeUse) {
  Json many = Json::array();
  for (size_t i = 0; i <= kMaxSignatures; ++i) {
    many.push_back(SignaturesToJson({publisher_->Sign(kManifestPurpose, "d")})[0]);
  }
  EXPECT_FALSE(SignaturesFromJson(&many).ok());
  Json bad_key = Json::array({{{"key", "rsa:00"}, {"ed25519", std::string(88, 'A')}}});
  EXPECT_FALSE(SignaturesFromJson(&bad_key).ok());
  Json short_sig = Json::array({{{"key", publisher_->fingerprint()}, {"ed25519", "AAAA"}}});
  EXPECT_FALSE(SignaturesFromJson(&short_sig).ok());
  Json none;
  EXPECT_TRUE(SignaturesFromJson(&none)->empty());
}

TEST_F(SigningTest, ASignedManifestKeepsItsRootDigestAndItsSignatureThroughJson) {
  TempDir model;
  testing::WriteShard(model.path() / "model.safetensors", 300000, 7);
  BuildOptions unsigned_options;
  unsigned_options.chunk_size = 64 * 1024;
  Result<Manifest> plain = BuildManifest("m", model.path(), unsigned_options);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  BuildOptions options = unsigned_options;
  options.sign_key = publisher_;
  Result<Manifest> built = BuildManifest("m", model.path(), options);
  ASSERT_TRUE(built.ok()) << built.status().message();
  // Signing adds a signature, not a new version.
  EXPECT_EQ(built->root_digest, plain->root_digest);
  ASSERT_EQ(built->signatures.size(), 1u);
  Result<Manifest> parsed = ParseManifest(built->ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(CheckManifestSigned(*parsed, trust_.get(), "test").ok());
  EXPECT_TRUE(CheckManifestSigned(*plain, nullptr, "test").ok());
  Status refused = CheckManifestSigned(*plain, trust_.get(), "127.0.0.1:1");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("model m"), std::string::npos);
  EXPECT_NE(refused.message().find("127.0.0.1:1"), std::string::npos);
  // A signature vouches for content: the same manifest under another name
  // verifies (its root digest is the same) ...
  Json renamed = built->ToJson();
  renamed["model"] = "m2";
  Result<Manifest> same = ParseManifest(renamed);
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_TRUE(CheckManifestSigned(*same, trust_.get(), "test").ok());
  // ... and moved onto another content (here, another fingerprint) it does not.
  Json other = built->ToJson();
  other["fingerprint"] = std::string(64, 'a');
  other["root_digest"] = ManifestRootDigest(other);
  Result<Manifest> moved = ParseManifest(other);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  Status moved_refused = CheckManifestSigned(*moved, trust_.get(), "test");
  EXPECT_EQ(moved_refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(moved_refused.message().find("does not verify"), std::string::npos);
}

TEST_F(SigningTest, ABundlesSignatureCoversEveryFileAndIsCheckedWithTrust) {
  TempDir cache, out;
  testing::WriteRandom(cache.path() / "kernel.so", 5000, 3);
  testing::WriteRandom(cache.path() / "sub/kernel.py", 700, 4);
  CompileCacheSpec spec;
  spec.name = "triton";
  spec.dir = cache.path();
  spec.key = std::string(16, 'a');
  spec.factors = {{"cuda", "12.4"}};
  spec.sign_key = publisher_;
  Result<Json> bundle = BundleCompileCache(spec);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  ASSERT_TRUE(bundle->contains("signatures"));
  EXPECT_TRUE(ValidateCompileCacheBundle(*bundle, spec.name, spec.key, spec.factors,
                                         kMaxCompileCacheBytes, trust_.get())
                  .ok());
  // A file's bytes and its digest replaced together: the digest no longer matches the signature.
  Json altered = *bundle;
  const std::string evil = "print('pwned')\n";
  altered["files"][0]["data"] = Base64Encode(evil);
  altered["files"][0]["size"] = evil.size();
  altered["files"][0]["sha256"] = Sha256Hex(evil);
  Result<Json> refused = ValidateCompileCacheBundle(altered, spec.name, spec.key, spec.factors,
                                                    kMaxCompileCacheBytes, trust_.get());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  // Without trust the altered bundle is self-consistent and accepted: the signature is what stops
  // it.
  EXPECT_TRUE(ValidateCompileCacheBundle(altered, spec.name, spec.key, spec.factors).ok());
  // Unsigned: refused with trust, naming the trusted key.
  spec.sign_key = nullptr;
  Result<Json> plain = BundleCompileCache(spec);
  Result<Json> unsigned_refused = ValidateCompileCacheBundle(
      *plain, spec.name, spec.key, spec.factors, kMaxCompileCacheBytes, trust_.get());
  ASSERT_FALSE(unsigned_refused.ok());
  EXPECT_NE(unsigned_refused.status().message().find("not signed"), std::string::npos);
  EXPECT_EQ(CompileCacheBundleDigest(*plain), CompileCacheBundleDigest(*bundle));
}

}  // namespace
}  // namespace seedd
