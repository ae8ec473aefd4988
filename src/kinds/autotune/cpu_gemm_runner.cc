#include "kinds/autotune/cpu_gemm_runner.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <random>

#include "kinds/autotune/gemm.h"
#include "kinds/autotune/table.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

constexpr int kReps = 3;  // timings per candidate; the median counts

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string IsaFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::string out;
    for (const char* f :
         {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "amx_tile", "neon"}) {
      if ((" " + line + " ").find(std::string(" ") + f + " ") != std::string::npos) {
        out += (out.empty() ? "" : " ") + std::string(f);
      }
    }
    return out;
  }
  return "";
}

double TimeMs(const GemmTactic& t, const GemmShape& s, const std::vector<float>& a,
              const std::vector<float>& b, std::vector<float>& c) {
  auto start = std::chrono::steady_clock::now();
  RunGemm(t, s.m, s.n, s.k, a.data(), b.data(), c.data());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

std::string CpuGemmRunner::EntryKey(const GemmShape& s) {
  return "('sgemm', 'cpu_gemm', ((" + std::to_string(s.m) + ", " + std::to_string(s.k) + "), (" +
         std::to_string(s.k) + ", " + std::to_string(s.n) + ")), ())";
}

Json CpuGemmRunner::Configuration() const {
  Json shapes = Json::array();
  for (const auto& s : shapes_) shapes.push_back({s.m, s.n, s.k});
  Json tactics = Json::array();
  for (const auto& t : GemmTactics()) tactics.push_back(t.Name());
  return Json{{"runner", "cpu-gemm"}, {"shapes", shapes}, {"tactics", tactics}};
}

Json CpuGemmRunner::EnvironmentMetadata() const {
  return Json{{"seedd_version", "0.1.0"},
              {"compiler", std::string("gcc-compatible ") + __VERSION__},
              {"cpu", CpuModel()},
              {"isa", IsaFlags()}};
}

Status CpuGemmRunner::Run(ArtifactStore& disk, const ArtifactKey& key,
                          const AutotuneRunContext& ctx) {
  AutotuneTable table;
  const Json local = EnvironmentMetadata();
  Result<std::optional<std::string>> saved = disk.Get(key);
  if (!saved.ok()) return saved.status();
  if (saved->has_value()) {
    Result<AutotuneTable> loaded = AutotuneTable::Parse(**saved);
    if (!loaded.ok()) {
      Logger().warn("Ignoring the on-disk autotune table {}: {}", key.ToString(),
                    loaded.status().message());
    } else if (MetadataMismatches m =
                   ClassifyMetadata(loaded->metadata.value_or(Json::object()), local);
               loaded->metadata.has_value() && !m.empty()) {
      Logger().warn("Retuning: the on-disk autotune table {} is for another environment: {}",
                    key.ToString(), m.Describe());
    } else {
      table = std::move(*loaded);
    }
  }
  table.metadata = local;
  Json records = table.records.value_or(Json::object());
  if (!records.is_object()) records = Json::object();
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int tuned = 0;
  for (const GemmShape& s : shapes_) {
    const std::string entry = EntryKey(s);
    if (table.entries.count(entry) != 0) continue;  // loaded: nothing to tune
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
        c(static_cast<size_t>(s.m) * s.n);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    const auto& tactics = GemmTactics();
    size_t best = 0;
    double best_ms = 0;
    double naive_ms = 0;
    for (size_t t = 0; t < tactics.size(); ++t) {
      if (ctx.cancelled()) return Status::Cancelled("the autotune pass was stopped");
      std::vector<double> ms;
      for (int r = 0; r < kReps; ++r) ms.push_back(TimeMs(tactics[t], s, a, b, c));
      std::sort(ms.begin(), ms.end());
      ++kernels_timed_;
      if (t == 0) naive_ms = ms[kReps / 2];
      if (t == 0 || ms[kReps / 2] < best_ms) {
        best = t;
        best_ms = ms[kReps / 2];
      }
    }
    table.entries[entry] = Json::array({"cpu_gemm", best});
    records[entry] =
        Json{{"tactic", tactics[best].Name()}, {"best_ms", best_ms}, {"naive_ms", naive_ms}};
    ++tuned;
    Logger().debug("Tuned {}x{}x{}: {} {:.2f} ms (naive {:.2f} ms)", s.m, s.n, s.k,
                   tactics[best].Name(), best_ms, naive_ms);
  }
  table.records = records;
  Logger().info("cpu-gemm autotune: {} shape(s) tuned, {} loaded from the table", tuned,
                shapes_.size() - static_cast<size_t>(tuned));
  return disk.Put(key, table.Serialize());
}

Result<std::vector<GemmShape>> ParseGemmShapes(std::string_view text) {
  std::vector<GemmShape> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view one = text.substr(0, comma);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) {
      return Status::InvalidArgument("invalid GEMM shapes: trailing ','");
    }
    int dims[3] = {0, 0, 0};
    for (int d = 0; d < 3; ++d) {
      size_t x = d < 2 ? one.find('x') : one.size();
      std::string_view part = one.substr(0, x);
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), dims[d]);
      if (ec != std::errc() || end != part.data() + part.size() || dims[d] < 1 || dims[d] > 4096 ||
          (d < 2 && x == std::string_view::npos)) {
        return Status::InvalidArgument("invalid GEMM shape '" + std::string(one) +
                                       "' (expected MxNxK, each 1-4096)");
      }
      one = d < 2 ? one.substr(x + 1) : "";
    }
    out.push_back({dims[0], dims[1], dims[2]});
  }
  if (out.empty()) return Status::InvalidArgument("no GEMM shapes given");
  return out;
}

std::vector<GemmShape> DefaultGemmShapes() {
  // Decode- and prefill-like projections of a small model: about 30 s cold on
  // two cores, most of it in the naive baseline each shape is measured against.
  return {{512, 512, 512}, {256, 1024, 512}, {1024, 256, 512}, {384, 768, 768},
          {768, 384, 768}, {512, 768, 256},  {640, 640, 320},  {256, 2048, 256}};
}

std::unique_ptr<CpuGemmRunner> NewCpuGemmRunner(std::vector<GemmShape> shapes) {
  return std::make_unique<CpuGemmRunner>(std::move(shapes));
}

}  // namespace seedd
