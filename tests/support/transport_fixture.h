// Shared by the control-channel tests: a server on loopback with an artifact
// and a seedable whose Resolve blocks until released, clients of it, and raw
// exchanges.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "seedd/artifact_kind.h"
#include "seedd/seed_transport.h"
#include "support/test_util.h"

namespace seedd::transport_testing {

inline constexpr char kToken[] = "s3cret-token-4f2a9c";
inline constexpr char kHash[] = "0123456789abcdef";

inline Json KeyFields(const std::string& file = "kernels.bin") {
  return Json{{"namespace", "triton"}, {"config_hash", kHash}, {"filename", file}};
}

inline Json ArtifactRequest(const std::string& file = "kernels.bin") {
  Json r = KeyFields(file);
  r["kind"] = "artifact";
  return r;
}

// A seedable whose Resolve blocks until released; for concurrency tests.
class SlowSeedable final : public Seedable {
 public:
  std::string_view kind() const override { return "slow"; }
  Result<Json> RequestParams(const Json&) const override { return Json::object(); }
  Result<std::optional<Json>> Resolve(const Json&) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    return std::optional<Json>(Json("slow answer"));
  }
  Result<Json> ValidatePayload(const Json& p) const override { return p; }
  Status Install(const Json&, const Json&) override { return Status::Ok(); }

  void WaitEntered(int n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int entered_ = 0;
  bool released_ = false;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = NewMemoryArtifactStore();
    ASSERT_TRUE(store->Put(*ArtifactKey::Make("triton", kHash, "kernels.bin"), "compiled").ok());
    slow_ = std::make_shared<SlowSeedable>();
    server_ = Serve({NewArtifactSeedable(std::move(store)), slow_});
  }
  void TearDown() override {
    slow_->Release();
    if (server_) server_->Close();
  }

  std::unique_ptr<SeedTransport> Serve(std::vector<SeedablePtr> seedables,
                                       TransportOptions options = {},
                                       const std::string& host = "127.0.0.1") {
    SeedConfig config;
    config.listen = HostPort{host, 0};
    config.token = kToken;
    auto t = SeedTransport::Create(std::move(seedables), config, options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    auto bound = (*t)->StartListener();
    EXPECT_TRUE(bound.ok()) << bound.status().ToString();
    addr_ = **bound;
    return std::move(*t);
  }

  std::unique_ptr<SeedTransport> Client(std::optional<HostPort> source,
                                        const std::string& token = kToken,
                                        TransportOptions options = {}) {
    SeedConfig config;
    config.source = std::move(source);
    config.token = token;
    auto t = SeedTransport::Create({}, config, options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(*t);
  }

  // Sends raw bytes and returns the parsed response (null when the peer sent none).
  Json RawExchange(const std::string& bytes) {
    UniqueFd fd = testing::ConnectRaw(addr_);
    EXPECT_TRUE(fd.valid());
    testing::SendAll(fd.get(), bytes);
    return testing::ReadResponse(fd.get());
  }

  std::shared_ptr<SlowSeedable> slow_;
  std::unique_ptr<SeedTransport> server_;
  HostPort addr_;
};

}  // namespace seedd::transport_testing
