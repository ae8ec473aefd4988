// seedctl status: a daemon's /status (its --admin-listen endpoint) for people,
// or as served for scripts.
#include <httplib.h>

#include <cstdio>

#include "seedctl.h"

namespace seedctl {
namespace {

std::string Mib(uint64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof(out), "%.1f", static_cast<double>(bytes) / 1048576.0);
  return out;
}

uint64_t U(const seedd::Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

double D(const seedd::Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string S(const seedd::Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

void PrintTable(const seedd::Json& status) {
  std::printf("seedd on %s: %s\n", S(status, "listen").c_str(),
              status.value("ready", false) ? "ready" : "starting (not ready)");
  const seedd::Json none = seedd::Json::array();
  const seedd::Json& models = status.contains("models") ? status["models"] : none;
  std::printf("\n%-24s %-14s %10s %15s  %s\n", "MODEL", "ROOT DIGEST", "MiB", "CHUNKS", "STATE");
  if (models.empty()) std::printf("(none)\n");
  for (const auto& m : models) {
    const std::string chunks =
        std::to_string(U(m, "chunks_served")) + "/" + std::to_string(U(m, "chunks"));
    std::string state = m.value("complete", false) ? "complete" : "relaying while pulling";
    if (m.value("pulled", false)) state += ", pulled";
    state += ", " + S(m, "chunk_digest") + " chunks";
    if (auto by = m.find("signed_by");
        by != m.end() && by->is_array() && !by->empty() && (*by)[0].is_string()) {
      state += ", signed by " + (*by)[0].get<std::string>();
    }
    std::printf("%-24s %-14s %10s %15s  %s\n", S(m, "name").c_str(),
                S(m, "root_digest").substr(0, 12).c_str(), Mib(U(m, "bytes")).c_str(),
                chunks.c_str(), state.c_str());
  }
  const seedd::Json& pulls = status.contains("pulls") ? status["pulls"] : none;
  std::printf("\n%-24s %-8s %22s %10s %8s %7s %8s\n", "PULL", "STATE", "PROGRESS MiB", "MB/s",
              "SOURCES", "RELAYS", "SECONDS");
  if (pulls.empty()) std::printf("(none)\n");
  for (const auto& p : pulls) {
    const uint64_t total = U(p, "bytes_total");
    const uint64_t done = U(p, "bytes_verified");
    char progress[64];
    std::snprintf(progress, sizeof(progress), "%s/%s %3.0f%%", Mib(done).c_str(),
                  Mib(total).c_str(),
                  total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / total);
    std::printf("%-24s %-8s %22s %10.1f %8llu %7llu %8.1f\n", S(p, "model").c_str(),
                S(p, "state").c_str(), progress, D(p, "rate_bytes_per_second") / 1e6,
                static_cast<unsigned long long>(U(p, "sources")),
                static_cast<unsigned long long>(U(p, "relays")), D(p, "seconds"));
    if (!S(p, "error").empty()) std::printf("  error: %s\n", S(p, "error").c_str());
  }
  const seedd::Json& warmups = status.contains("warmups") ? status["warmups"] : none;
  std::printf("\n%-32s %-8s %8s  %s\n", "WARMUP", "STATE", "SECONDS", "SOURCE");
  if (warmups.empty()) std::printf("(none)\n");
  for (const auto& w : warmups) {
    std::printf("%-32s %-8s %8.1f  %s\n", S(w, "kind").c_str(), S(w, "state").c_str(),
                D(w, "seconds"), S(w, "source").c_str());
    if (!S(w, "error").empty()) std::printf("  error: %s\n", S(w, "error").c_str());
  }
  // Whether the engine opened what the warmups installed.
  const seedd::Json& usage = status.contains("usage") ? status["usage"] : none;
  if (!usage.empty()) {
    std::printf("\n%-32s %-9s %9s %8s %12s\n", "INSTALLED", "STATE", "FILES", "OPENED",
                "FIRST OPEN");
    for (const auto& u : usage) {
      char first[32] = "-";
      if (u.contains("first_open_after_seconds")) {
        std::snprintf(first, sizeof(first), "%.1f s", D(u, "first_open_after_seconds"));
      }
      std::printf("%-32s %-9s %9llu %8llu %12s\n", S(u, "cache").c_str(), S(u, "state").c_str(),
                  static_cast<unsigned long long>(U(u, "files_installed")),
                  static_cast<unsigned long long>(U(u, "files_opened")), first);
      if (S(u, "state") == "unwatched") std::printf("  not watched: %s\n", S(u, "watch").c_str());
      if (S(u, "state") == "unused") {
        std::printf(
            "  none opened in %.0f s: the engine rebuilt instead or reads another "
            "directory (the daemon's log says what to check)\n",
            D(u, "seconds_since_install"));
      }
    }
  }
  const seedd::Json& stores = status.contains("stores") ? status["stores"] : none;
  std::printf("\n%-8s %s\n", "STORE", "LOCATION");
  for (const auto& s : stores) {
    std::printf("%-8s %s\n", S(s, "backend").c_str(), S(s, "location").c_str());
  }
}

}  // namespace

int RunStatus(const std::string& admin, bool json, double timeout_s) {
  auto where = seedd::ParseHostPort(admin);
  if (!where.ok()) return Fail("--admin: " + where.status().message());
  httplib::Client client(where->is_ipv6() ? "[" + where->host + "]" : where->host, where->port);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  httplib::Result res = client.Get("/status");
  if (!res) {
    return Fail(admin + ": " + httplib::to_string(res.error()) +
                " (is it the daemon's --admin-listen address?)");
  }
  if (res->status != 200) {
    return Fail(admin + ": HTTP " + std::to_string(res->status) + " for /status", kExitError);
  }
  if (res->body.size() > (16u << 20)) return Fail(admin + ": /status is larger than 16 MiB");
  auto status = seedd::ParseJson(res->body);
  if (!status.ok() || !status->is_object()) {
    return Fail(admin + ": /status is not a JSON object (is it a seedd admin endpoint?)",
                kExitError);
  }
  if (json) {
    std::printf("%s\n", status->dump(2).c_str());
  } else {
    PrintTable(*status);
  }
  return kExitOk;
}

}  // namespace seedctl
