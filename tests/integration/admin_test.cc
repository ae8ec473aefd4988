// The admin endpoint of real seedd processes, scraped over HTTP: /metrics in
// the Prometheus text format (checked by promtool) with counters that move as
// requests, pulls, relaying and store operations happen; /healthz and /readyz
// (503 while a pull at start runs); /status and seedctl status; JSON logs.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <regex>
#include <thread>

#include "seedd/json_text.h"
#include "support/daemon_process.h"
#include "support/process.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::Process;
using testing::RunCommand;

using testing::Has;

// The value of the sample `series` (name and labels exactly as exposed); -1 when absent.
double Sample(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

class AdminTest : public testing::DaemonProcessTest {
 protected:
  // A daemon with an admin endpoint on a free port; its admin address in *admin
  // (from its log), its D2D address in *addr once it reported ready ("" when
  // `wait_ready` is false).
  std::unique_ptr<Process> Daemon(const std::string& name, std::vector<std::string> extra,
                                  std::string* admin, std::string* addr, bool wait_ready = true) {
    extra.insert(extra.begin(), {"--admin-listen", "127.0.0.1:0"});
    auto p = StartDaemon(std::move(extra), addr, dir_.path() / name, "127.0.0.1:0", false);
    const std::regex at("Admin endpoint on http://([0-9.]+:[0-9]+)/");
    std::smatch m;
    EXPECT_TRUE(testing::WaitUntil([&] {
      const std::string err = p->Stderr();
      return std::regex_search(err, m, at);
    })) << p->Stderr();
    *admin = m.size() > 1 ? m[1].str() : "";
    if (wait_ready) *addr = ReadyAddress(*p);
    return p;
  }
  // GET `path` from `admin`: {status, body}; status -1 when there was no answer.
  std::pair<int, std::string> Get(const std::string& admin, const std::string& path) {
    const size_t colon = admin.rfind(':');
    httplib::Client client(admin.substr(0, colon), std::stoi(admin.substr(colon + 1)));
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_read_timeout(std::chrono::seconds(5));
    auto res = client.Get(path);
    if (!res) return {-1, ""};
    return {res->status, res->body};
  }
  // promtool's verdict on an exposition: "" when it passes.
  std::string Promtool(const std::string& exposition) {
    const fs::path file = dir_.path() / "metrics.txt";
    std::ofstream(file, std::ios::trunc) << exposition;
    auto r = RunCommand({"/bin/sh", "-c", "promtool check metrics < '" + file.string() + "'"});
    return r.status == 0 ? "" : "promtool exit " + std::to_string(r.status) + ": " + r.out + r.err;
  }
};

TEST_F(AdminTest, MetricsMoveWithRequestsPullsRelayingAndStoreOperations) {
  std::string origin_admin, origin;
  auto o = Daemon("origin", {"--model", "m=" + model().string()}, &origin_admin, &origin);
  const std::string before = Get(origin_admin, "/metrics").second;
  EXPECT_EQ(Promtool(before), "");
  EXPECT_EQ(Sample(before, "seedd_auth_failures_total"), 0);
  EXPECT_EQ(Sample(before, "seedd_connections_open{plane=\"data\"}"), 0);

  // A pull at start, with JSON logs.
  std::string puller_admin, puller;
  auto p = Daemon("puller", {"--source", origin, "--pull", "m", "--log-format", "json"},
                  &puller_admin, &puller);
  EXPECT_EQ(Get(puller_admin, "/healthz"), std::make_pair(200, std::string("ok\n")));
  EXPECT_EQ(Get(puller_admin, "/readyz").first, 200);
  // seedctl pulls from the puller: relayed bytes.
  auto pulled = RunCommand({SEEDCTL_BIN, "pull", "--source", puller, "--model", "m", "--into",
                            (dir_.path() / "dest").string(), "--token-file", token_file()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  // A wrong token, an artifact miss (a disk store get) and an unknown kind.
  const fs::path bad_token = dir_.path() / "bad-token";
  std::ofstream(bad_token) << "wrong\n";
  fs::permissions(bad_token, fs::perms::owner_read | fs::perms::owner_write);
  auto refused = RunCommand({SEEDCTL_BIN, "ls", "--source", origin, "--token-file", bad_token});
  EXPECT_NE(refused.status, 0);
  auto miss =
      RunCommand({SEEDCTL_BIN, "fetch", "--source", origin, "--token-file", token_file(),
                  "--namespace", "triton", "--config-hash", "00112233445566778899aabbccddeeff",
                  "--filename", "k.bin", "--cache-dir", (dir_.path() / "fetched").string()});
  EXPECT_EQ(miss.status, 3) << miss.err;
  auto odd = RunCommand({SEEDCTL_BIN, "request", "--source", origin, "--token-file", token_file(),
                         "--kind", "no-such-kind-\"x"});
  EXPECT_NE(odd.status, 0);

  const std::string after = Get(origin_admin, "/metrics").second;
  EXPECT_EQ(Promtool(after), "");
  const uint64_t model_bytes = (3 << 20) + 300;
  EXPECT_EQ(Sample(after, "seedd_auth_failures_total"), 1) << after;
  EXPECT_EQ(Sample(after, "seedd_requests_total{kind=\"weight_shards\",outcome=\"ok\"}"), 1)
      << after;
  EXPECT_GE(Sample(after, "seedd_requests_total{kind=\"weight_data\",outcome=\"data\"}"), 1);
  EXPECT_EQ(Sample(after, "seedd_requests_total{kind=\"artifact\",outcome=\"miss\"}"), 1) << after;
  EXPECT_EQ(Sample(after, "seedd_requests_total{kind=\"unknown\",outcome=\"error\"}"), 1) << after;
  EXPECT_FALSE(Has(after, "no-such-kind")) << "a peer's text became a label";
  EXPECT_EQ(Sample(after,
                   "seedd_store_operations_total{backend=\"disk\",op=\"get\","
                   "result=\"miss\"}"),
            1)
      << after;
  EXPECT_EQ(Sample(after, "seedd_bytes_sent_total{plane=\"data\"}"), model_bytes) << after;
  EXPECT_GT(Sample(after, "seedd_bytes_received_total{plane=\"control\"}"),
            Sample(before, "seedd_bytes_received_total{plane=\"control\"}"));
  EXPECT_EQ(Sample(after, "seedd_relay_bytes_sent_total"), 0);  // served from --model

  const std::string relay = Get(puller_admin, "/metrics").second;
  EXPECT_EQ(Promtool(relay), "");
  EXPECT_EQ(Sample(relay, "seedd_bytes_received_total{plane=\"data\"}"), model_bytes) << relay;
  // 256 KiB chunks (a small model's): 12 of w.bin, 1 of config.json.
  EXPECT_EQ(Sample(relay, "seedd_chunks_verified_total"), 13) << relay;
  EXPECT_EQ(Sample(relay, "seedd_chunk_verification_failures_total"), 0);
  EXPECT_EQ(Sample(relay, "seedd_pull_progress_ratio{model=\"m\"}"), 1) << relay;
  EXPECT_EQ(Sample(relay, "seedd_warmup_seconds_count{kind=\"weight_shards\",source=\"peer\"}"), 1)
      << relay;
  EXPECT_EQ(Sample(relay, "seedd_relay_bytes_sent_total"), model_bytes) << relay;

  // /status, as JSON and through seedctl status.
  auto [code, body] = Get(puller_admin, "/status");
  ASSERT_EQ(code, 200);
  auto status = ParseJson(body);
  ASSERT_TRUE(status.ok()) << body;
  EXPECT_EQ((*status)["ready"], true);
  EXPECT_EQ((*status)["listen"], puller);
  ASSERT_EQ((*status)["models"].size(), 1u) << body;
  EXPECT_EQ((*status)["models"][0]["name"], "m");
  EXPECT_EQ((*status)["models"][0]["complete"], true);
  ASSERT_EQ((*status)["pulls"].size(), 1u) << body;
  EXPECT_EQ((*status)["pulls"][0]["state"], "done");
  EXPECT_EQ((*status)["pulls"][0]["bytes_verified"], model_bytes);
  EXPECT_EQ((*status)["pulls"][0]["sources"], 1);
  EXPECT_EQ((*status)["warmups"][0]["kind"], "weight_shards m");
  EXPECT_EQ((*status)["stores"][0]["backend"], "disk");
  auto table = RunCommand({SEEDCTL_BIN, "status", "--admin", puller_admin});
  EXPECT_EQ(table.status, 0) << table.err;
  EXPECT_TRUE(Has(table.out, ": ready")) << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex("\\nm +done +3\\.0/3\\.0 100%")))
      << table.out;
  auto json = RunCommand({SEEDCTL_BIN, "status", "--admin", puller_admin, "--json"});
  EXPECT_EQ(json.status, 0);
  EXPECT_TRUE(ParseJson(json.out).ok()) << json.out;
  auto nobody = RunCommand({SEEDCTL_BIN, "status", "--admin", "127.0.0.1:1"});
  EXPECT_EQ(nobody.status, 2);
  EXPECT_TRUE(Has(nobody.err, "--admin-listen")) << nobody.err;
  EXPECT_EQ(Get(puller_admin, "/nope").first, 404);

  // Every log line of the JSON-logging daemon is one object with its fields.
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(seconds(30)), 0);
  std::istringstream log(p->Stderr());
  int lines = 0;
  for (std::string line; std::getline(log, line); ++lines) {
    auto j = ParseJson(line);
    ASSERT_TRUE(j.ok() && j->is_object()) << line;
    for (const char* key : {"time", "level", "event", "fields"}) {
      EXPECT_TRUE(j->contains(key)) << key << " in " << line;
    }
  }
  EXPECT_GE(lines, 3);
}

TEST_F(AdminTest, ReadyzAnswers503WhileAPullAtStartRuns) {
  testing::StalledOrigin stalled(model());
  std::string admin, unused;
  auto p = Daemon("puller", {"--source", stalled.addr(), "--pull", "tiny"}, &admin, &unused,
                  /*wait_ready=*/false);
  ASSERT_TRUE(testing::WaitUntil([&] { return stalled.held() > 0; })) << p->Stderr();
  EXPECT_EQ(Get(admin, "/healthz").first, 200);
  auto [code, text] = Get(admin, "/readyz");
  EXPECT_EQ(code, 503) << text;
  auto status = ParseJson(Get(admin, "/status").second);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["ready"], false);
  ASSERT_EQ((*status)["pulls"].size(), 1u) << status->dump();
  EXPECT_EQ((*status)["pulls"][0]["state"], "pulling");
  EXPECT_EQ((*status)["warmups"][0]["state"], "running");
  const std::string exposition = Get(admin, "/metrics").second;
  EXPECT_EQ(Promtool(exposition), "");
  EXPECT_EQ(Sample(exposition, "seedd_pull_progress_ratio{model=\"tiny\"}"), 0) << exposition;
  EXPECT_GE(Sample(exposition, "seedd_connections_open{plane=\"data\"}"), 0);
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();
}

}  // namespace
}  // namespace seedd
