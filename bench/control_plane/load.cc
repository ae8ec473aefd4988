// Control-plane load generator: N client threads, one connection per request (as the
// protocol is), for a fixed time; optionally K stalled peers kept connected the whole
// time (each sends part of a header and waits; when the server cuts one, it reconnects).
// Prints one line: label, requests/s, p50/p99/max latency in ms, errors.
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "transport/client.h"
#include "wire/json_text.h"

namespace {

using seedd::Clock;

struct Stats {
  std::vector<double> latencies_ms;
  uint64_t errors = 0;
};

// Keeps `n` connections open, each having sent 4 of a header's 8 bytes.
void HoldStalledPeers(const seedd::HostPort& target, int n, const std::atomic<bool>& stop) {
  std::vector<seedd::UniqueFd> fds(n);
  auto open_one = [&](seedd::UniqueFd& fd) {
    auto r = seedd::ConnectTcp(target, std::chrono::seconds(5));
    if (!r.ok()) return;
    fd = std::move(*r);
    ::send(fd.get(), "\0\0\0\0", 4, MSG_NOSIGNAL);
  };
  for (auto& fd : fds) open_one(fd);
  while (!stop) {
    std::vector<pollfd> p;
    for (auto& fd : fds) p.push_back({fd.get(), POLLIN, 0});
    if (::poll(p.data(), p.size(), 50) <= 0) continue;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i].revents != 0 || !fds[i].valid()) {
        fds[i].Reset();
        open_one(fds[i]);
      }
    }
  }
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"seedd control-plane load generator"};
  std::string target_text;
  std::string label = "run";
  std::string request_json;
  int clients = 8;
  double seconds = 5;
  int stalled = 0;
  app.add_option("--target", target_text, "HOST:PORT of the server")->required();
  app.add_option("--label", label, "name printed on the result line");
  app.add_option("--request", request_json, "the request JSON (token from SEEDD_TOKEN)")
      ->required();
  app.add_option("--clients", clients, "client threads")->capture_default_str();
  app.add_option("--seconds", seconds, "measured duration")->capture_default_str();
  app.add_option("--stalled", stalled, "stalled peers held open")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);

  auto target = seedd::ParseHostPort(target_text);
  auto request = seedd::ParseJson(request_json);
  if (!target.ok() || !request.ok() || !request->is_object()) {
    std::fprintf(stderr, "load: bad --target or --request\n");
    return 2;
  }
  const char* token = std::getenv("SEEDD_TOKEN");
  (*request)["token"] = token == nullptr ? "" : token;

  std::atomic<bool> stop_stalled{false};
  std::thread staller;
  if (stalled > 0) {
    staller = std::thread([&] { HoldStalledPeers(*target, stalled, stop_stalled); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let them connect
  }

  seedd::ExchangeOptions options;
  options.response_timeout = std::chrono::seconds(30);
  std::vector<Stats> stats(clients);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      Stats& s = stats[i];
      while (Clock::now() < end) {
        auto t0 = Clock::now();
        auto r = seedd::ExchangeJson(*target, *request, options);
        auto t1 = Clock::now();
        if (!r.ok() || !r->is_object() || (*r)["status"] != "ok") {
          ++s.errors;
          continue;
        }
        s.latencies_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  stop_stalled = true;
  if (staller.joinable()) staller.join();

  Stats all;
  for (auto& s : stats) {
    all.latencies_ms.insert(all.latencies_ms.end(), s.latencies_ms.begin(), s.latencies_ms.end());
    all.errors += s.errors;
  }
  double rps = static_cast<double>(all.latencies_ms.size()) / seconds;
  double p50 = Percentile(all.latencies_ms, 0.50);
  double p99 = Percentile(all.latencies_ms, 0.99);
  double max = all.latencies_ms.empty()
                   ? 0
                   : *std::max_element(all.latencies_ms.begin(), all.latencies_ms.end());
  std::printf("%s rps=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f ok=%zu errors=%llu\n",
              label.c_str(), rps, p50, p99, max, all.latencies_ms.size(),
              static_cast<unsigned long long>(all.errors));
  return 0;
}
