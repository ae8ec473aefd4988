// Control-plane load generator: N client threads, one connection per request (as the
// protocol is), for a fixed time; optionally K stalled peers kept connected the whole
// time (each sends part of a header and waits; when the server cuts one, it reconnects).
// Prints one line: label, requests/s, p50/p99/max latency in ms, errors.
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "seedd/json_text.h"
#include "transport/client.h"

namespace {

using seedd::Clock;

struct Stats {
  std::vector<double> latencies_ms;
  uint64_t errors = 0;
};

// Keeps `n` connections open, each having sent 4 of a header's 8 bytes. Connects
// without blocking, so a server with a short accept backlog does not slow the start.
// Against a loopback target they come from `sources` addresses, 127.0.0.2 on
// (the clients measured use 127.0.0.1): a server bounds what one host holds, and
// the question is whether other hosts' stalls hold up the clients.
void HoldStalledPeers(const seedd::HostPort& target, int n, int sources,
                      const std::atomic<bool>& stop, std::atomic<int>* live) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints, &ai) != 0) {
    return;
  }
  struct Slot {
    seedd::UniqueFd fd;
    bool sent = false;
  };
  std::vector<Slot> slots(n);
  const bool loopback = ai->ai_family == AF_INET && target.host.rfind("127.", 0) == 0;
  auto open_one = [&](Slot& slot) {
    slot.fd.Reset(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    slot.sent = false;
    if (loopback && sources > 0) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      const size_t i = static_cast<size_t>(&slot - slots.data());
      from.sin_addr.s_addr = htonl(0x7f000002u + static_cast<uint32_t>(i % sources));
      (void)::bind(slot.fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from));
    }
    (void)::connect(slot.fd.get(), ai->ai_addr, ai->ai_addrlen);
  };
  for (auto& slot : slots) open_one(slot);
  std::vector<pollfd> p(slots.size());
  while (!stop) {
    for (size_t i = 0; i < slots.size(); ++i) {
      p[i] = {slots[i].fd.get(), static_cast<short>(slots[i].sent ? POLLIN : POLLOUT), 0};
    }
    int stalled_now = 0;
    for (const auto& slot : slots) stalled_now += slot.sent ? 1 : 0;
    live->store(stalled_now);
    if (::poll(p.data(), p.size(), 50) <= 0) continue;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (p[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(slots[i].fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (!slots[i].sent && err == 0 && (p[i].revents & POLLOUT)) {
        slots[i].sent = ::send(slots[i].fd.get(), "\0\0\0\0", 4, MSG_NOSIGNAL) == 4;
        if (slots[i].sent) continue;
      }
      open_one(slots[i]);  // cut by the server, refused, or failed: stall again
    }
  }
  ::freeaddrinfo(ai);
}

// User + system CPU seconds of `pid` so far (0 when pid is 0 or unreadable).
double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return 0;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Fields after the command name, which is in parentheses and may contain spaces.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
      2) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
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
  int stalled_sources = 4;
  double timeout_s = 30;
  int server_pid = 0;
  app.add_option("--target", target_text, "HOST:PORT of the server")->required();
  app.add_option("--label", label, "name printed on the result line");
  app.add_option("--request", request_json, "the request JSON (token from SEEDD_TOKEN)")
      ->required();
  app.add_option("--clients", clients, "client threads")->capture_default_str();
  app.add_option("--seconds", seconds, "measured duration")->capture_default_str();
  app.add_option("--stalled", stalled, "stalled peers held open")->capture_default_str();
  app.add_option("--stalled-sources", stalled_sources,
                 "loopback addresses the stalled peers come from, 127.0.0.2 on (0: the "
                 "clients' own)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "seconds a request may take before it counts as an error")
      ->capture_default_str();
  app.add_option("--server-pid", server_pid,
                 "the server's pid: also report its CPU time per request (from /proc)");
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
  std::atomic<int> stalled_live{0};
  std::thread staller;
  if (stalled > 0) {
    staller = std::thread(
        [&] { HoldStalledPeers(*target, stalled, stalled_sources, stop_stalled, &stalled_live); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let them connect
  }

  seedd::ExchangeOptions options;
  options.response_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const double cpu_before = ProcessCpuSeconds(server_pid);
  const double self_before = SelfCpuSeconds();
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
  const double cpu_used = ProcessCpuSeconds(server_pid) - cpu_before;
  const int stalled_at_end = stalled_live.load();
  const double self_used = SelfCpuSeconds() - self_before;
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
  double cpu_us =
      all.latencies_ms.empty() ? 0 : cpu_used * 1e6 / static_cast<double>(all.latencies_ms.size());
  double client_us =
      all.latencies_ms.empty() ? 0 : self_used * 1e6 / static_cast<double>(all.latencies_ms.size());
  std::printf(
      "%s rps=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f ok=%zu errors=%llu cpu_us=%.1f "
      "client_cpu_us=%.1f stalled=%d\n",
      label.c_str(), rps, p50, p99, max, all.latencies_ms.size(),
      static_cast<unsigned long long>(all.errors), cpu_us, client_us, stalled_at_end);
  return 0;
}
