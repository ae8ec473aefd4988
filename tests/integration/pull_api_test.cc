// seedd::PullModel (seedd/weights.h): a model pulled as a library call from real
// daemons on loopback, with its progress, statistics, pin, errors and
// cancellation; the same call seedctl pull makes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "seedd/weights.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using testing::SameTree;
using testing::WeightsFixture;
using testing::WriteRandom;

class PullModelTest : public WeightsFixture {
 protected:
  PullOptions Pull(const std::string& source) {
    PullOptions o;
    o.sources = {source};
    o.token = testing::kToken;
    o.timeout = std::chrono::seconds(5);
    return o;
  }
};

TEST_F(PullModelTest, AModelArrivesByteIdenticalWithProgressAndStatistics) {
  const HostPort origin = Serve(model_);
  const std::string root = ManifestFrom(origin).root_digest;
  PullOptions o = Pull(origin.ToString());
  o.root_digest = root;  // the version it serves: accepted
  std::mutex mu;
  std::vector<PullProgress> seen;
  o.progress = [&](const PullProgress& p) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(p);
  };
  const auto into = dir_.path() / "dest";
  Result<PullResult> r = PullModel("tiny", into, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameTree(model_, into));
  EXPECT_EQ(r->manifest.root_digest, root);
  EXPECT_EQ(r->manifest.model, "tiny");
  EXPECT_GE(r->stats.bytes_received, r->manifest.total_size - r->stats.chunks_holes * (256 << 10));
  ASSERT_EQ(r->stats.used.size(), 1u);
  EXPECT_TRUE(r->stats.used[0].seed);
  EXPECT_GT(r->seconds, 0);
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].verified_bytes, seen[i - 1].verified_bytes);
  }
  EXPECT_EQ(seen.back().verified_bytes, r->manifest.total_size);
  EXPECT_EQ(seen.back().total_bytes, r->manifest.total_size);

  // Again into the same directory: up to date, nothing moved.
  Result<PullResult> again = PullModel("tiny", into, Pull(origin.ToString()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->stats.up_to_date);
}

TEST_F(PullModelTest, EachFailureHasItsCodeAndWritesNothing) {
  const HostPort origin = Serve(model_);
  const auto into = dir_.path() / "dest";
  PullOptions pinned = Pull(origin.ToString());
  pinned.root_digest = std::string(64, 'a');
  Result<PullResult> r = PullModel("tiny", into, pinned);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("not the pinned"), std::string::npos) << r.status().message();

  r = PullModel("nosuch", into, Pull(origin.ToString()));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();

  PullOptions bad = Pull("no-port");
  r = PullModel("tiny", into, bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  PullOptions bad_pin = Pull(origin.ToString());
  bad_pin.root_digest = "abc";
  r = PullModel("tiny", into, bad_pin);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();

  // Nobody listening: retried until the timeout, each wait reported.
  uint16_t port = 0;
  UniqueFd refusing = testing::RefusingPort(&port);
  ASSERT_TRUE(refusing.valid());
  PullOptions down = Pull("127.0.0.1:" + std::to_string(port));
  down.timeout = std::chrono::milliseconds(1200);
  int retries = 0;
  down.on_retry = [&](const std::string& why, std::chrono::milliseconds wait, int round,
                      std::chrono::milliseconds left) {
    ++retries;
    EXPECT_NE(why.find("no source answered"), std::string::npos) << why;
    EXPECT_GT(wait.count(), 0);
    EXPECT_EQ(round, retries + 1);
    EXPECT_LE(wait, left);
  };
  r = PullModel("tiny", into, down);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("gave up after 1.2 s"), std::string::npos)
      << r.status().message();
  EXPECT_GE(retries, 1);
  EXPECT_FALSE(std::filesystem::exists(into));
}

// A new revision that rewrote one region of one file: every other chunk is
// copied from the earlier version's directory, checked, and only the changed
// chunks cross the network; a basis whose bytes were altered lends nothing.
TEST_F(PullModelTest, ANewRevisionFetchesOnlyTheChunksThatChangedAndCopiesTheRest) {
  const std::filesystem::path v1 = dir_.path() / "v1";
  const HostPort first = Serve(model_);
  ASSERT_TRUE(PullModel("tiny", v1, Pull(first.ToString())).ok());

  // Revision 2: 300 KB rewritten in the middle of blob.bin (2 of its 10 chunks).
  const std::filesystem::path v2 = dir_.path() / "v2";
  std::filesystem::copy(model_, v2, std::filesystem::copy_options::recursive);
  {
    std::fstream f(v2 / "blob.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(600000);
    const std::string changed(300000, 'x');
    f.write(changed.data(), static_cast<std::streamsize>(changed.size()));
  }
  const HostPort second = Serve(v2);
  const Manifest m2 = ManifestFrom(second);
  uint64_t changed_bytes = 0;
  for (const ManifestChunk& c : m2.chunks) {
    if (c.file == "blob.bin" && c.offset < 900000 && c.offset + c.length > 600000) {
      changed_bytes += c.length;
    }
  }
  ASSERT_GT(changed_bytes, 0u);

  PullOptions o = Pull(second.ToString());
  o.reuse_from = {v1};
  const std::filesystem::path into = dir_.path() / "v2-pulled";
  Result<PullResult> r = PullModel("tiny", into, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameTree(v2, into));
  EXPECT_EQ(r->manifest.root_digest, m2.root_digest);
  EXPECT_EQ(r->stats.bytes_reused + changed_bytes, m2.total_size);
  EXPECT_EQ(r->stats.bytes_received, changed_bytes);
  EXPECT_EQ(r->stats.chunks_reused + 2, m2.chunks.size());

  // A basis altered behind seedd's back: its bytes fail the digests, so the
  // altered chunks are fetched, never copied.
  const std::filesystem::path tampered = dir_.path() / "tampered";
  std::filesystem::copy(v1, tampered, std::filesystem::copy_options::recursive);
  {
    std::fstream f(tampered / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000000);
    f.write("tampered", 8);
  }
  o.reuse_from = {tampered};
  const std::filesystem::path into2 = dir_.path() / "v2-from-tampered";
  Result<PullResult> r2 = PullModel("tiny", into2, o);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(SameTree(v2, into2));
  EXPECT_EQ(r2->stats.bytes_received, changed_bytes + 256 * 1024);
}

// --replace of a directory holding the earlier version: that directory is the
// basis, so a revision moves only what changed into it.
TEST_F(PullModelTest, ReplacingAnEarlierVersionCopiesWhatItShares) {
  const std::filesystem::path into = dir_.path() / "engine";
  ASSERT_TRUE(PullModel("tiny", into, Pull(Serve(model_).ToString())).ok());
  const std::filesystem::path v2 = dir_.path() / "v2";
  std::filesystem::copy(model_, v2, std::filesystem::copy_options::recursive);
  WriteRandom(v2 / "tokenizer" / "tokenizer.json", 1200, 9);
  const HostPort second = Serve(v2);
  PullOptions o = Pull(second.ToString());
  o.replace = true;
  Result<PullResult> r = PullModel("tiny", into, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameTree(v2, into));
  EXPECT_EQ(r->stats.bytes_received, 1200u);
  EXPECT_EQ(r->stats.bytes_reused + 1200, r->manifest.total_size);
}

TEST_F(PullModelTest, CancellingStopsAPullInProgress) {
  testing::StalledOrigin origin(model_);  // its data connections hang
  PullOptions o = Pull(origin.addr());
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  o.cancel = cancel;
  Result<PullResult> r = Status::Internal("not run");
  std::thread pull([&] { r = PullModel("tiny", dir_.path() / "dest", o); });
  ASSERT_TRUE(testing::WaitUntil([&] { return origin.held() > 0; }));
  const auto asked = std::chrono::steady_clock::now();
  cancel->store(true);
  pull.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(2));
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  origin.Close();
}

// A source that accepts and never answers the manifest request: a stop ends the
// wait for its answer at once (before, it waited out the 30 s first-byte bound).
TEST_F(PullModelTest, CancellingStopsAPullWaitingForTheManifest) {
  uint16_t port = 0;
  UniqueFd silent = testing::ListenLoopback(&port);  // the kernel accepts; nobody answers
  ASSERT_TRUE(silent.valid());
  PullOptions o = Pull("127.0.0.1:" + std::to_string(port));
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  o.cancel = cancel;
  Result<PullResult> r = Status::Internal("not run");
  std::thread pull([&] { r = PullModel("tiny", dir_.path() / "dest", o); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // waiting for the answer
  const auto asked = std::chrono::steady_clock::now();
  cancel->store(true);
  pull.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(2));
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "dest"));
}

}  // namespace
}  // namespace seedd
