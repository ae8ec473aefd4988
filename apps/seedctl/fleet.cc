// seedctl status --fleet and seedctl preheat: the fleet through its registry
// (seedd/fleet.h).
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "seedctl.h"

namespace seedctl {
namespace {

std::string Mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

std::string Percent(uint64_t done, uint64_t total) {
  char text[16];
  std::snprintf(text, sizeof(text), "%3.0f%%", total == 0 ? 100.0 : 100.0 * done / total);
  return text;
}

// One line per host and model version it holds or pulls.
void PrintFleet(const std::vector<seedd::FleetHost>& hosts) {
  std::printf("%-24s %-10s %-24s %-16s %-9s %s\n", "HOST", "ZONE", "MODEL", "ROOT", "STATE",
              "PROGRESS");
  if (hosts.empty()) std::printf("(no live daemon in the registry)\n");
  for (const seedd::FleetHost& h : hosts) {
    const std::string zone = h.zone.empty() ? "-" : h.zone;
    std::set<std::string> shown;
    for (const seedd::FleetPull& p : h.pulls) {
      if (p.state != "pulling" && p.state != "failed") continue;
      shown.insert(p.model + "@" + p.root_digest);
      std::printf("%-24s %-10s %-24s %-16.16s %-9s %s of %s %s%s\n", h.addr.c_str(), zone.c_str(),
                  p.model.c_str(), p.root_digest.c_str(), p.state.c_str(),
                  Mib(p.bytes_verified).c_str(), Mib(p.bytes_total).c_str(),
                  Percent(p.bytes_verified, p.bytes_total).c_str(),
                  p.preheat.empty() ? "" : ("  (preheat " + p.preheat + ")").c_str());
    }
    for (const seedd::FleetModel& m : h.models) {
      if (shown.count(m.name + "@" + m.root_digest) != 0) continue;
      std::printf("%-24s %-10s %-24s %-16.16s %-9s %s %s\n", h.addr.c_str(), zone.c_str(),
                  m.name.c_str(), m.root_digest.c_str(), m.complete ? "held" : "pulling",
                  Mib(m.bytes).c_str(), Percent(m.chunks_served, m.chunks).c_str());
    }
    if (h.models.empty() && h.pulls.empty()) {
      std::printf("%-24s %-10s %-24s %-16s %-9s\n", h.addr.c_str(), zone.c_str(), "-", "-",
                  h.ready ? "ready" : "starting");
    }
  }
}

}  // namespace

int RunFleetStatus(const std::string& registry, bool json) {
  seedd::Result<std::vector<seedd::FleetHost>> hosts = seedd::ReadFleet(registry);
  if (!hosts.ok()) return Fail(registry + ": " + hosts.status().message(), kExitError);
  if (json) {
    seedd::Json out = seedd::Json::array();
    for (const seedd::FleetHost& h : *hosts) {
      seedd::Json e = seedd::FleetHostJson(h);
      e.erase("updated_ms");
      e["addr"] = h.addr;
      e["age_seconds"] = h.age_seconds;
      out.push_back(std::move(e));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  PrintFleet(*hosts);
  return kExitOk;
}

int RunPreheat(const std::string& registry, const seedd::PreheatRequest& request, double wait_s) {
  seedd::Result<seedd::PreheatTicket> ticket = seedd::RequestPreheat(registry, request);
  if (!ticket.ok()) {
    return Fail(
        "preheat " + request.model + ": " + ticket.status().message(),
        ticket.status().code() == seedd::StatusCode::kInvalidArgument ? kExitUsage : kExitError);
  }
  const uint64_t want = ticket->places > 0
                            ? std::min<uint64_t>(ticket->places, ticket->matching_hosts)
                            : ticket->matching_hosts;
  const std::string whom =
      (ticket->places > 0 ? std::to_string(ticket->places) + " of the " : "all ") +
      std::to_string(ticket->matching_hosts) + " daemon(s)" +
      (request.zone.empty() ? "" : " of zone " + request.zone) + " (" +
      std::to_string(ticket->live_hosts) + " live)";
  std::printf("preheat %s: asked %s (request %s)\n", request.model.c_str(), whom.c_str(),
              ticket->id.c_str());
  std::fflush(stdout);
  if (wait_s <= 0) return kExitOk;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  size_t last = SIZE_MAX;
  for (;;) {
    seedd::Result<std::vector<seedd::FleetHost>> hosts = seedd::ReadFleet(registry);
    size_t holding = 0;
    if (hosts.ok()) {
      for (const seedd::FleetHost& h : *hosts) {
        if (!request.zone.empty() && h.zone != request.zone) continue;
        for (const seedd::FleetModel& m : h.models) {
          if (m.name == request.model && m.complete &&
              (request.root_digest.empty() || m.root_digest == request.root_digest)) {
            ++holding;
            break;
          }
        }
      }
    }
    if (holding != last) {
      std::printf("preheat %s: %zu of %llu daemon(s) hold it\n", request.model.c_str(), holding,
                  static_cast<unsigned long long>(want));
      std::fflush(stdout);
      last = holding;
    }
    if (holding >= want) return kExitOk;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (hosts.ok()) PrintFleet(*hosts);
      return Fail("preheat " + request.model + ": " + std::to_string(holding) + " of " +
                      std::to_string(want) + " daemon(s) hold it after " +
                      std::to_string(static_cast<int64_t>(wait_s)) + " s",
                  kExitError);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace seedctl
