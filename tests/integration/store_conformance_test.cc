// One conformance suite for every ArtifactStore backend: memory, disk, file://,
// Redis (a real redis-server) and S3 (a real s3rver).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <thread>

#include "seedd/artifact_store.h"
#include "seedd/store_registry.h"
#include "support/servers.h"
#include "support/test_util.h"

namespace seedd {
namespace {

using testing::RedisServer;
using testing::S3Server;
using testing::TempDir;

// The servers are shared by every test of the suite; started on first use.
struct Servers {
  Servers() {
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }
  RedisServer redis;
  S3Server s3;
  TempDir dir;
};

Servers& GetServers() {
  static Servers* servers = new Servers;  // stopped by the environment below
  return *servers;
}

class ServersEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { delete &GetServers(); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new ServersEnvironment);

struct Backend {
  std::string name;
  std::function<ArtifactStorePtr(const std::string& unique)> make;
  bool restartable = false;
};

// A backend's name in test listings (gtest prints a parameter's bytes without
// this, and ctest shows them in every test's name).
void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

ArtifactStorePtr OpenOrDie(const std::string& url) {
  auto store = OpenArtifactStore(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<Backend> Backends() {
  return {
      {"memory", [](const std::string&) { return NewMemoryArtifactStore(); }},
      {"disk",
       [](const std::string& u) {
         DiskStoreOptions options;
         options.max_value_bytes = 1ull << 30;
         return NewDiskArtifactStore("", GetServers().dir.path() / ("disk-" + u), options);
       }},
      {"file",
       [](const std::string& u) {
         auto dir = GetServers().dir.path() / ("file-" + u);
         std::filesystem::create_directories(dir);
         return OpenOrDie("file://" + dir.string());
       }},
      {"redis",
       [](const std::string& u) {
         return OpenOrDie(GetServers().redis.url("prefix=" + u + ":&timeout_ms=5000"));
       },
       true},
      {"s3", [](const std::string& u) { return OpenOrDie(GetServers().s3.url(u)); }, true},
  };
}

class StoreConformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    // A fresh namespace per test: a prefix in Redis and S3, a directory on disk.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string unique = info->name();
    for (char& c : unique) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
    }
    unique_ = unique;
    store_ = GetParam().make(unique_);
    ASSERT_NE(store_, nullptr);
  }
  static ArtifactKey Key(const std::string& kind, const std::string& file) {
    return *ArtifactKey::Make(kind, "0123456789abcdef", file);
  }
  std::string unique_;
  ArtifactStorePtr store_;
};

TEST_P(StoreConformance, RoundTripsMissesAndOverwrites) {
  auto miss = store_->Get(Key("k", "a"));
  ASSERT_TRUE(miss.ok()) << miss.status().ToString();
  EXPECT_FALSE(miss->has_value());
  ASSERT_TRUE(store_->Put(Key("k", "a"), "first").ok());
  EXPECT_EQ(**store_->Get(Key("k", "a")), "first");
  ASSERT_TRUE(store_->Put(Key("k", "a"), "second, longer").ok());
  EXPECT_EQ(**store_->Get(Key("k", "a")), "second, longer");
}

TEST_P(StoreConformance, ValuesAreBinarySafe) {
  ASSERT_TRUE(store_->Put(Key("k", "empty"), "").ok());
  auto empty = store_->Get(Key("k", "empty"));
  ASSERT_TRUE(empty.ok() && empty->has_value());
  EXPECT_EQ(**empty, "");
  std::string nul("a\0b\0\xff\xfe", 6);
  ASSERT_TRUE(store_->Put(Key("k", "nul"), nul).ok());
  EXPECT_EQ(**store_->Get(Key("k", "nul")), nul);
  std::string big(50 << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  ASSERT_TRUE(store_->Put(Key("k", "big"), big).ok());
  auto got = store_->Get(Key("k", "big"));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_TRUE(**got == big);
}

TEST_P(StoreConformance, ListsByPrefixAndDeletes) {
  for (const auto& [kind, file] : std::vector<std::pair<std::string, std::string>>{
           {"alpha", "x"}, {"alpha", "y"}, {"beta", "z"}}) {
    ASSERT_TRUE(store_->Put(Key(kind, file), kind + file).ok());
  }
  auto all = store_->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<std::string>{"alpha/0123456789abcdef/x", "alpha/0123456789abcdef/y",
                                            "beta/0123456789abcdef/z"}));
  EXPECT_EQ(*store_->List("alpha/"),
            (std::vector<std::string>{"alpha/0123456789abcdef/x", "alpha/0123456789abcdef/y"}));
  EXPECT_EQ(*store_->List("alpha/0123456789abcdef/y"),
            (std::vector<std::string>{"alpha/0123456789abcdef/y"}));
  EXPECT_TRUE(store_->List("gamma")->empty());
  ASSERT_TRUE(store_->Delete(Key("alpha", "x")).ok());
  EXPECT_FALSE(store_->Get(Key("alpha", "x"))->has_value());
  EXPECT_TRUE(store_->Delete(Key("alpha", "x")).ok());  // deleting a missing key is fine
  EXPECT_EQ(store_->List("")->size(), 2u);
}

TEST_P(StoreConformance, TraversalAndSeparatorsAreRejectedBeforeAnyIo) {
  // Keys are validated when built, so a store never sees one of these.
  for (const char* bad :
       {"../etc/passwd", "k/../x", "k/h/a/b", "/abs/h/f", "k//f", "k/h/..", "k/h/a\\b"}) {
    EXPECT_FALSE(ArtifactKey::Parse(bad).ok()) << bad;
  }
  EXPECT_TRUE(store_->List("")->empty());
}

TEST_P(StoreConformance, ConcurrentWritersOfOneKeyLeaveOneWholeValue) {
  constexpr size_t kSize = 1 << 20;
  std::vector<std::thread> writers;
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&, w] {
      EXPECT_TRUE(
          store_->Put(Key("k", "contended"), std::string(kSize, static_cast<char>('A' + w))).ok());
    });
  }
  for (auto& t : writers) t.join();
  auto got = store_->Get(Key("k", "contended"));
  ASSERT_TRUE(got.ok() && got->has_value());
  const std::string& v = **got;
  ASSERT_EQ(v.size(), kSize);
  EXPECT_EQ(v.find_first_not_of(v[0]), std::string::npos) << "torn value";
}

// The backends with a server behind them.
class ServerStoreConformance : public StoreConformance {};

TEST_P(ServerStoreConformance, RecoversAfterTheServerRestarts) {
  ASSERT_TRUE(store_->Put(Key("k", "before"), "v").ok());
  if (GetParam().name == "redis") {
    GetServers().redis.Stop();
    EXPECT_FALSE(store_->Get(Key("k", "before")).ok());
    GetServers().redis.Start();
  } else {
    GetServers().s3.Stop();
    EXPECT_FALSE(store_->Get(Key("k", "before")).ok());
    GetServers().s3.Start();
  }
  ASSERT_TRUE(store_->Put(Key("k", "after"), "w").ok());
  EXPECT_EQ(**store_->Get(Key("k", "after")), "w");
}

std::vector<Backend> ServerBackends() {
  std::vector<Backend> out;
  for (auto& b : Backends()) {
    if (b.restartable) out.push_back(b);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, StoreConformance, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(ServerBackends, ServerStoreConformance,
                         ::testing::ValuesIn(ServerBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace seedd
