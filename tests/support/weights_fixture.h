// Shared by the weights tests: model trees on disk (plain and in the Hugging
// Face hub cache layout), tree comparison, raw data-plane records, and a fixture
// that serves models from real daemons on loopback.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"
#include "seedd/seed_transport.h"
#include "support/test_util.h"

namespace seedd::testing {

inline constexpr char kToken[] = "weights-token-8e3f";

std::string ReadAll(const std::filesystem::path& p);
void WriteRandom(const std::filesystem::path& p, size_t n, unsigned seed);
// A safetensors file with one U8 tensor "w" of `bytes` bytes drawn from `seed`:
// another seed gives the same header (a new checkpoint of the same shapes).
void WriteShard(const std::filesystem::path& p, size_t bytes, unsigned seed);
// True when both trees hold the same regular files (links followed) with the same bytes.
bool SameTree(const std::filesystem::path& a, const std::filesystem::path& b);

// Lays out `files` (relative name → bytes) as the hub cache does under `hub`:
// models--ORG--NAME/blobs/<sha256>, snapshots/<commit>/<name> as a relative link
// into ../../blobs (deeper for nested names), refs/main holding `commit`.
// Returns the snapshot directory.
std::filesystem::path MakeHubModel(const std::filesystem::path& hub, const std::string& repo,
                                   const std::map<std::string, std::string>& files,
                                   const std::string& commit);

// Sends one data-plane request record and reads the response header and body;
// status 0xdead when the stream ended first.
struct Record {
  uint32_t index = 0, status = 0, aux = 0;
  std::string body;
};
// `body` follows the record (a filtered watch's bitmap).
Record Ask(int fd, const char* magic, uint32_t index, const std::string& body = "");
// Sends the request record `magic` + `index` and reads an answer of `bytes`
// (header included). *whole: whether all of it could be read as soon as any
// of it arrived, as when the server writes it at once.
std::string AskWhole(int fd, const char* magic, uint32_t index, size_t bytes, bool* whole);
// Announces `relay` to `server` for `root` on a data connection, as a relaying
// fetcher does; the connection stays open for requests.
// `zone`: said when not empty.
UniqueFd Announce(const HostPort& server, const std::string& root, const std::string& relay,
                  const std::string& zone = "");
// Opens an authenticated data connection for `root_digest`; the JSON answer in *answer.
UniqueFd OpenData(const HostPort& server, const std::string& root_digest, Json* answer);

// An origin whose manifests are answered and whose data connections hang until
// it goes (Close or the destructor): a pull from it is in progress for as long
// as the test likes. It serves `model` as "tiny" with the default chunk size.
// A scripted data-plane source on `fd` whose first frame was `request`: when
// the request asks for the challenge (transport/data_auth.h), proves that it
// holds kToken and reads the fetcher's proof (returned, for tests that look),
// as a daemon of the fleet does. Then the script answers "ok" itself.
Json AnswerDataChallenge(int fd, const std::string& request);

class StalledOrigin {
 public:
  explicit StalledOrigin(const std::filesystem::path& model);
  ~StalledOrigin();
  std::string addr() const { return addr_.ToString(); }
  const HostPort& host_port() const { return addr_; }
  // Data connections held so far.
  int held() const { return entered_; }
  // Releases the held connections and stops listening.
  void Close();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;  // GUARDED_BY(mu_)
  std::atomic<int> entered_{0};
  HostPort addr_;
  std::unique_ptr<SeedTransport> transport_;
};

class WeightsFixture : public ::testing::Test {
 protected:
  // model_: a safetensors shard, an opaque large file, small files, a nested one.
  void SetUp() override;
  void TearDown() override;

  // A daemon serving `dir` (or an hf: spec) as model "tiny" with 256 KiB chunks
  // digested by `chunk_digest` ("xxh3" or "sha256").
  HostPort Serve(const std::filesystem::path& dir, const std::string& chunk_digest = "xxh3");
  // Serves `server`'s data plane and its weight_shards kind until the test ends.
  HostPort ServeWeights(std::shared_ptr<WeightServer> server, TransportOptions topts = {});
  Manifest ManifestFrom(const HostPort& source);
  FetchOptions Options();

  TempDir dir_;
  std::filesystem::path model_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
  std::vector<std::unique_ptr<SeedTransport>> transports_;
};

}  // namespace seedd::testing
