// Artifact store throughput: T threads (one connection each where the backend
// has connections) doing get or put of N-byte values for a fixed time against a
// store URL (or "memory"). Prints ops/s and MB/s.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "seedd/artifact_store.h"
#include "seedd/store_registry.h"

int main(int argc, char** argv) {
  CLI::App app{"seedd artifact store benchmark"};
  std::string url;
  std::string op = "get";
  std::string label = "run";
  size_t size = 64 * 1024;
  double seconds = 3;
  int threads = 1;
  int keys = 16;
  app.add_option("--store", url, "store URL")->required();
  app.add_option("--op", op, "get or put")->check(CLI::IsMember({"get", "put"}));
  app.add_option("--size", size, "value size in bytes");
  app.add_option("--seconds", seconds, "duration");
  app.add_option("--threads", threads, "concurrent clients");
  app.add_option("--keys", keys, "distinct keys cycled through");
  app.add_option("--label", label, "name printed on the result line");
  CLI11_PARSE(app, argc, argv);

  auto store = seedd::OpenArtifactStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "store_bench: %s\n", store.status().message().c_str());
    return 2;
  }
  std::string value(size, '\0');
  for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 131 + 7);
  std::vector<seedd::ArtifactKey> names;
  for (int i = 0; i < keys; ++i) {
    names.push_back(
        *seedd::ArtifactKey::Make("bench", "0123456789abcdef", "v" + std::to_string(i)));
    if (op == "get" && !(*store)->Put(names.back(), value).ok()) {
      std::fprintf(stderr, "store_bench: cannot prepare %s\n", names.back().ToString().c_str());
      return 1;
    }
  }
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> errors{0};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; std::chrono::steady_clock::now() < end; i += threads) {
        const auto& key = names[i % names.size()];
        bool ok;
        if (op == "get") {
          auto r = (*store)->Get(key);
          ok = r.ok() && r->has_value() && (*r)->size() == size;
        } else {
          ok = (*store)->Put(key, value).ok();
        }
        (ok ? ops : errors)++;
      }
    });
  }
  for (auto& w : workers) w.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double rate = static_cast<double>(ops) / elapsed;
  std::printf("%s ops_s=%.1f mb_s=%.1f errors=%llu\n", label.c_str(), rate,
              rate * static_cast<double>(size) / 1e6, static_cast<unsigned long long>(errors));
  return errors == 0 ? 0 : 1;
}
