// Store URLs, startup errors, S3 error mapping and retries, run-time failures.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "seedd/artifact_kind.h"
#include "seedd/store_registry.h"
#include "stores/s3/sigv4.h"
#include "stores/store_url.h"
#include "support/fake_http.h"
#include "support/servers.h"
#include "support/test_util.h"

namespace seedd {
namespace {

using testing::FakeHttpServer;

class StoreErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }
  static std::string OpenError(const std::string& url) {
    auto r = OpenArtifactStore(url);
    return r.ok() ? "opened" : r.status().message();
  }
  static ArtifactKey Key() { return *ArtifactKey::Make("k", "0123456789abcdef", "f"); }
};

TEST_F(StoreErrors, AMisspelledSchemeListsTheKnownOnes) {
  EXPECT_EQ(OpenError("rediss://127.0.0.1:6379"),
            "store rediss://127.0.0.1:6379: unknown scheme 'rediss' (known schemes: file://, "
            "redis://, s3://)");
  EXPECT_NE(OpenError("not a url").find("malformed store URL"), std::string::npos);
  EXPECT_NE(OpenError("not a url").find("known schemes: file://, redis://, s3://"),
            std::string::npos);
}

TEST_F(StoreErrors, AnUnreachableRedisIsAStartupErrorNamingIt) {
  uint16_t port = testing::FreePort();
  std::string err = OpenError("redis://:hunter2@127.0.0.1:" + std::to_string(port));
  EXPECT_NE(err.find("store redis://:***@127.0.0.1:" + std::to_string(port)), std::string::npos)
      << err;
  EXPECT_NE(err.find("cannot connect to redis at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("hunter2"), std::string::npos) << "the password leaked: " << err;
}

TEST_F(StoreErrors, RedisParametersAreValidated) {
  EXPECT_NE(OpenError("redis://127.0.0.1:1?tll=5").find("unknown redis parameter 'tll'"),
            std::string::npos);
  EXPECT_NE(OpenError("redis://127.0.0.1:1/x").find("redis database must be a number"),
            std::string::npos);
}

TEST_F(StoreErrors, AMissingBucketIsAStartupError) {
  testing::S3Server s3;
  std::string err = OpenError("s3://no-such-bucket?endpoint=" + s3.endpoint());
  EXPECT_NE(err.find("bucket 'no-such-bucket' does not exist"), std::string::npos) << err;
}

// libcurl's account of the failure, with the address and port it could not
// reach, not only its code's text ("Couldn't connect to server").
TEST_F(StoreErrors, AnUnreachableS3EndpointIsAStartupErrorNamingItsPort) {
  const uint16_t port = testing::FreePort();
  std::string err = OpenError("s3://bucket?endpoint=http://127.0.0.1:" + std::to_string(port) +
                              "&region=us-east-1");
  EXPECT_NE(err.find("127.0.0.1 port " + std::to_string(port)), std::string::npos) << err;
}

TEST_F(StoreErrors, AnUnknownAccessKeyIsAnAuthorizationError) {
  testing::S3Server s3;
  setenv("AWS_ACCESS_KEY_ID", "NOT-A-KEY", 1);
  auto r = OpenArtifactStore(s3.url());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("HTTP 403 InvalidAccessKeyId"), std::string::npos)
      << r.status().message();
}

TEST_F(StoreErrors, AWrongSecretKeyIsAClearAuthorizationError) {
  // What S3 answers to a signature made with the wrong secret.
  FakeHttpServer fake({FakeHttpServer::Response(
      403, "Forbidden",
      "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated "
      "does not match the signature you provided. Check your key and signing method."
      "</Message></Error>")});
  auto r = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("HTTP 403 SignatureDoesNotMatch: The request signature"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(fake.requests(), 1);  // 4xx is not retried
}

TEST_F(StoreErrors, S3RetriesServerErrorsThenSucceeds) {
  const std::string list = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  FakeHttpServer fake(
      {FakeHttpServer::Response(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>"),
       FakeHttpServer::Response(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>"),
       FakeHttpServer::Response(200, "OK", list), FakeHttpServer::Response(503, "Slow Down", ""),
       FakeHttpServer::Response(503, "Slow Down", ""),
       FakeHttpServer::Response(200, "OK", "object bytes")});
  auto store = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto value = (*store)->Get(Key());
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(**value, "object bytes");
  EXPECT_EQ(fake.requests(), 6);
}

TEST_F(StoreErrors, S3GivesUpAfterPersistentServerErrors) {
  FakeHttpServer fake({FakeHttpServer::Response(500, "Internal Error",
                                                "<Error><Code>InternalError</Code></Error>")});
  auto r = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("after 4 attempts"), std::string::npos);
  EXPECT_EQ(fake.requests(), 4);
}

TEST_F(StoreErrors, S3DetectsAServerThatStoredOtherBytes) {
  const std::string list = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  FakeHttpServer fake({FakeHttpServer::Response(200, "OK", list),
                       "HTTP/1.1 200 OK\r\nETag: \"00000000000000000000000000000000\"\r\n"
                       "Content-Length: 0\r\nConnection: close\r\n\r\n"});
  auto store = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_TRUE(store.ok());
  Status s = (*store)->Put(Key(), "payload");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
}

// A store's writer (or a man in the middle of http://) announces a 16 GiB
// object: it is refused at its Content-Length, before any byte of it is read or
// memory reserved for it, and not asked for again.
TEST_F(StoreErrors, AnS3ObjectLargerThanTheLimitIsRefusedBeforeItIsRead) {
  const std::string list = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  FakeHttpServer fake(
      {FakeHttpServer::Response(200, "OK", list),
       "HTTP/1.1 200 OK\r\nContent-Length: 17179869184\r\n\r\n" + std::string(1 << 20, 'x')});
  auto store = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto value = (*store)->Get(Key());
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(value.status().message().find("larger than 64 MiB"), std::string::npos)
      << value.status().message();
  EXPECT_EQ(fake.requests(), 2);  // the listing at open, then one GET
}

// The same without a Content-Length: the body is read up to the limit only.
TEST_F(StoreErrors, AnS3BodyStreamedPastTheLimitIsCutThere) {
  const std::string list = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  FakeHttpServer fake(
      {FakeHttpServer::Response(200, "OK", list),
       "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + std::string((64 << 20) + (1 << 20), 'x')});
  auto store = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto value = (*store)->Get(Key());
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kResourceExhausted) << value.status().ToString();
  EXPECT_EQ(fake.requests(), 2);
}

// A listing whose server says "truncated" for ever ends, with an error.
TEST_F(StoreErrors, AnS3ListingThatNeverEndsIsCut) {
  std::string page =
      "<ListBucketResult><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>again</NextContinuationToken>";
  for (int i = 0; i < 1000; ++i) page += "<Key>k/0123456789abcdef/f" + std::to_string(i) + "</Key>";
  page += "</ListBucketResult>";
  const std::string first = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  FakeHttpServer fake(
      {FakeHttpServer::Response(200, "OK", first), FakeHttpServer::Response(200, "OK", page)});
  auto store = OpenArtifactStore("s3://bucket?endpoint=" + fake.endpoint());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto keys = (*store)->List("");
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kResourceExhausted);
  EXPECT_LE(fake.requests(), 1 + 101);
}

// A value larger than the limit in Redis is refused from its STRLEN, unread.
TEST_F(StoreErrors, ARedisValueLargerThanTheLimitIsRefusedUnread) {
  testing::RedisServer redis;
  auto store = OpenArtifactStore(redis.url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_OK((*store)->Put(Key(), std::string((64 << 20) + 1, 'v')));
  auto value = (*store)->Get(Key());
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kResourceExhausted) << value.status().ToString();
  const ArtifactKey empty = *ArtifactKey::Make("k", "0123456789abcdef", "empty");
  ASSERT_OK((*store)->Put(empty, ""));
  auto got = (*store)->Get(empty);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ(**got, "");
  auto absent = (*store)->Get(*ArtifactKey::Make("k", "0123456789abcdef", "absent"));
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
}

// The Redis password from a file, so that it is on no command line: a server
// that requires it is served; a file that is missing is an error naming it.
TEST_F(StoreErrors, ARedisPasswordComesFromAFile) {
  testing::RedisServer redis;
  testing::TempDir dir;
  const auto file = dir.path() / "redis-password";
  std::ofstream(file) << "s3cret-redis-pass\n";
  {
    auto open = OpenArtifactStore(redis.url());
    ASSERT_TRUE(open.ok());
    testing::RunResult set =
        testing::RunCommand({"/usr/bin/redis-cli", "-p", std::to_string(redis.port()), "CONFIG",
                             "SET", "requirepass", "s3cret-redis-pass"});
    ASSERT_EQ(set.status, 0) << set.err;
  }
  auto refused = OpenArtifactStore(redis.url());  // without the password
  EXPECT_TRUE(!refused.ok() || !(*refused)->Put(Key(), "v").ok());
  auto store = OpenArtifactStore(redis.url("password_file=" + file.string()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_OK((*store)->Put(Key(), "v"));
  EXPECT_EQ(**(*store)->Get(Key()), "v");
  auto missing = OpenArtifactStore(redis.url("password_file=" + (dir.path() / "nope").string()));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read the password_file"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(missing.status().message().find("s3cret-redis-pass"), std::string::npos);
}

TEST(SigV4, MatchesAwsPublishedGetObjectExample) {
  // "Example: GET Object" of the AWS Signature Version 4 documentation for S3.
  SignedRequest req;
  req.method = "GET";
  req.host = "examplebucket.s3.amazonaws.com";
  req.path = "/test.txt";
  req.headers["range"] = "bytes=0-9";
  req.payload_sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  AwsCredentials creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  std::tm tm{};
  tm.tm_year = 2013 - 1900;
  tm.tm_mon = 4;
  tm.tm_mday = 24;
  auto headers = SignV4(req, creds, "us-east-1", timegm(&tm));
  EXPECT_EQ(headers["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(StoreUrl, ParsesUserPasswordHostPortPathAndQuery) {
  auto u = StoreUrl::Parse("redis://user:p%40ss@cache.local:6380/2?prefix=seedd%3A&ttl=60");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->scheme, "redis");
  EXPECT_EQ(*u->user, "user");
  EXPECT_EQ(*u->password, "p@ss");
  EXPECT_EQ(u->host, "cache.local");
  EXPECT_EQ(*u->port, 6380);
  EXPECT_EQ(u->path, "/2");
  EXPECT_EQ(u->query.at("prefix"), "seedd:");
  EXPECT_EQ(RedactStoreUrl("redis://user:p%40ss@cache.local:6380/2"),
            "redis://user:***@cache.local:6380/2");
  EXPECT_EQ(RedactStoreUrl("s3://b?endpoint=http://h:1&token=abc&region=r"),
            "s3://b?endpoint=http://h:1&token=***&region=r");
  // Only query parameters are redacted by name, never text elsewhere that looks like one.
  EXPECT_EQ(RedactStoreUrl("xyz://a:b@[:token=:1]:1"), "xyz://a:***@[:token=:1]:1");
  // A raw '?' or '/' in the password does not end it early (it was shown).
  EXPECT_EQ(RedactStoreUrl("redis://u:pa?ss/wd@h:1/0?prefix=x"), "redis://u:***@h:1/0?prefix=x");
  EXPECT_EQ(RedactStoreUrl("redis://h:1?password_file=/etc/seedd/redis"),
            "redis://h:1?password_file=***");
  // Found by store_url_fuzz: a password holding '=' is still the password.
  const std::string odd("F\0://:on=@", 10);
  EXPECT_EQ(RedactStoreUrl(odd), std::string("F\0://:***@", 10));
  EXPECT_EQ(StoreUrl::Parse(RedactStoreUrl(odd))->password, std::optional<std::string>("***"));
  EXPECT_FALSE(StoreUrl::Parse("redis://host:99999").ok());
  EXPECT_FALSE(StoreUrl::Parse("redis://host:1/%zz").ok());
}

TEST(TolerantStore, ARunTimeFailureIsAWarningAndAMiss) {
  testing::LogCapture logs;
  auto redis = std::make_unique<testing::RedisServer>();
  auto store = OpenArtifactStore(redis->url("timeout_ms=500"));
  ASSERT_TRUE(store.ok());
  auto tolerant = NewTolerantStore(std::move(*store));
  redis->Stop();
  auto r = tolerant->Get(*ArtifactKey::Make("k", "0123456789abcdef", "f"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "treating it as a miss")) << logs.Dump();
}

TEST(ArtifactKindWithStores, ResolvesFromTheDiskFirstThenSharedStoresInOrder) {
  testing::TempDir dir;
  auto first = NewMemoryArtifactStore();
  auto second = NewMemoryArtifactStore();
  auto key = *ArtifactKey::Make("triton", "0123456789abcdef", "k.bin");
  ASSERT_TRUE(first->Put(key, "from first").ok());
  ASSERT_TRUE(second->Put(key, "from second").ok());
  ASSERT_TRUE(second->Put(*ArtifactKey::Make("triton", "0123456789abcdef", "only2"), "2").ok());
  std::vector<std::shared_ptr<ArtifactStore>> shared;
  shared.push_back(std::move(first));
  shared.push_back(std::move(second));
  auto seedable = NewArtifactSeedable(dir.path(), std::move(shared));
  Json req = {{"namespace", "triton"}, {"config_hash", "0123456789abcdef"}, {"filename", "k.bin"}};
  auto r = seedable->Resolve(req);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((**r)["size"], 10);  // "from first"
  req["filename"] = "only2";
  r = seedable->Resolve(req);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((**r)["size"], 1);
}

}  // namespace
}  // namespace seedd
