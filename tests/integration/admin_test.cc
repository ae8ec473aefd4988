// The admin endpoint of real seedd processes, scraped over HTTP: /metrics in
// the Prometheus text format (checked by promtool) with counters that move as
// requests, pulls, relaying and store operations happen; /healthz and /readyz
// (503 while a pull at start runs); /status and seedctl status; JSON logs.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>

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
  // What a pipeline filters on is a field, not words in the message: the pull's
  // model, version, size and time, and the seed kind it was adopted as.
  std::istringstream log(p->Stderr());
  int lines = 0;
  Json pulled_fields;
  for (std::string line; std::getline(log, line); ++lines) {
    auto j = ParseJson(line);
    ASSERT_TRUE(j.ok() && j->is_object()) << line;
    for (const char* key : {"time", "level", "event", "fields"}) {
      EXPECT_TRUE(j->contains(key)) << key << " in " << line;
    }
    if ((*j)["event"].get<std::string>().rfind("Pulled model m ", 0) == 0) {
      pulled_fields = (*j)["fields"];
    }
  }
  EXPECT_GE(lines, 3);
  ASSERT_TRUE(pulled_fields.is_object()) << p->Stderr();
  EXPECT_EQ(pulled_fields["model"], "m") << pulled_fields;
  EXPECT_TRUE(pulled_fields["root_digest"].is_string() &&
              pulled_fields["root_digest"].get<std::string>().size() == 64)
      << pulled_fields;
  EXPECT_EQ(pulled_fields["bytes"], (3 << 20) + 300) << pulled_fields;
  EXPECT_TRUE(pulled_fields["seconds"].is_number()) << pulled_fields;
  EXPECT_EQ(pulled_fields["seed_kind"], "weight_shards") << pulled_fields;
  EXPECT_EQ(pulled_fields["source"], origin) << pulled_fields;
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

// The daemon's peak resident memory (VmHWM), in bytes.
uint64_t PeakRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

HostPort Where(const std::string& admin) {
  const size_t colon = admin.rfind(':');
  return HostPort{admin.substr(0, colon),
                  static_cast<uint16_t>(std::stoi(admin.substr(colon + 1)))};
}

// Sends `request` on a new connection and reads the answer until the daemon closes.
std::string Exchange(const std::string& admin, const std::string& request) {
  UniqueFd fd = testing::ConnectRaw(Where(admin));
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  testing::SendAll(fd.get(), request);
  return testing::ReadToEof(fd.get());
}

// seedctl pointed at the admin port by mistake is told so at once, not after
// the request deadline with "connection closed".
TEST_F(AdminTest, ASeedRequestToTheAdminPortIsAnsweredAtOnceAndNamedAsHttp) {
  std::string admin, addr;
  auto d = Daemon("d", {}, &admin, &addr);
  const auto start = std::chrono::steady_clock::now();
  auto ls = RunCommand({SEEDCTL_BIN, "ls", "--source", admin, "--token-file", token_file()});
  EXPECT_NE(ls.status, 0);
  EXPECT_TRUE(Has(ls.err,
                  "it answered 'HTTP/1.1 400 Bad Request'): an HTTP server, such as a "
                  "daemon's --admin-listen port"))
      << ls.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(AdminTest, OnlyGetAndHeadAreServedAndABodyIsRefusedUnread) {
  std::string admin, addr;
  auto p = Daemon("d", {}, &admin, &addr);
  EXPECT_TRUE(
      Has(Exchange(admin, "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 200 OK\r\n"));
  const std::string head = Exchange(admin, "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << "HEAD has no body: " << head;
  const std::string post = Exchange(admin, "POST /healthz HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(Has(post, "HTTP/1.1 405 ")) << post;
  EXPECT_TRUE(Has(post, "Allow: GET, HEAD\r\n")) << post;
  const std::string body =
      Exchange(admin, "GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(Has(body, "HTTP/1.1 413 ")) << body;
  const std::string big = Exchange(admin, "GET /healthz HTTP/1.1\r\nX: " + std::string(9000, 'a'));
  EXPECT_TRUE(Has(big, "HTTP/1.1 431 ")) << big;
  EXPECT_TRUE(Has(Exchange(admin, "GET /nowhere?x=1 HTTP/1.1\r\n\r\n"), "/healthz, /readyz"));
}

// What a liveness probe needs: /healthz answered within 1 s while 16
// connections send a header byte every 300 ms and another streams a 64 MiB
// chunked POST. The tricklers are cut at the request deadline (5 s) + 1 s, the
// POST is refused before its body is read, and the daemon's peak resident
// memory grows by less than 10 MB.
TEST_F(AdminTest, ProbesAreAnsweredWhileTricklersAndAChunkedPostAreUnderWay) {
  std::string admin, addr;
  auto p = Daemon("d", {}, &admin, &addr);
  EXPECT_EQ(Get(admin, "/metrics").first, 200);  // every page the daemon touches is touched
  const uint64_t rss_before = PeakRss(p->pid());
  ASSERT_GT(rss_before, 0u);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::atomic<bool> stop{false};
  std::atomic<int> cut{0};
  std::atomic<int64_t> longest_ms{0};
  std::thread trickle([&] {
    std::vector<UniqueFd> fds;
    for (int i = 0; i < 16; ++i) fds.push_back(testing::ConnectRaw(Where(admin)));
    const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(4000, 'a');
    for (size_t at = 0; at < head.size() && !stop; ++at) {
      for (UniqueFd& fd : fds) {
        if (!fd.valid()) continue;
        char b;
        const ssize_t r = ::recv(fd.get(), &b, 1, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN) ||
            ::send(fd.get(), head.data() + at, 1, MSG_NOSIGNAL) != 1) {
          longest_ms = std::max<int64_t>(
              longest_ms,
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
          ++cut;
          fd.Reset();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  std::string post_answer;
  std::thread post([&] {
    UniqueFd fd = testing::ConnectRaw(Where(admin));
    testing::SendAll(fd.get(),
                     "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    // The refusal comes as soon as the head is read: before any of the body.
    timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) post_answer.assign(buf, static_cast<size_t>(n));
    const std::string chunk = "100000\r\n" + std::string(1 << 20, 'z') + "\r\n";
    for (int i = 0; i < 64 && !stop; ++i) {
      size_t off = 0;
      while (off < chunk.size()) {
        const ssize_t sent = ::send(fd.get(), chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
        if (sent <= 0) break;
        off += static_cast<size_t>(sent);
      }
      if (off < chunk.size()) break;  // the daemon closed
    }
  });
  int64_t slowest_ms = 0;
  int answered = 0;
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto asked = Clock::now();
    answered += Get(admin, "/healthz").first == 200;
    slowest_ms = std::max<int64_t>(
        slowest_ms,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked).count());
  }
  post.join();
  EXPECT_TRUE(testing::WaitUntil([&] { return cut == 16; }, std::chrono::seconds(10)))
      << cut << " of 16 tricklers cut";
  stop = true;
  trickle.join();
  EXPECT_EQ(answered, 10);
  EXPECT_LT(slowest_ms, 1000);
  EXPECT_LE(longest_ms, 6000 + 300);
  EXPECT_LT(PeakRss(p->pid()) - rss_before, 10u << 20);
  EXPECT_TRUE(Has(post_answer, "HTTP/1.1 413 ")) << post_answer;
}

}  // namespace
}  // namespace seedd
