// The fleet through its registry (seedd/fleet.h).
#include "seedd/fleet.h"

#include <cmath>

#include "common/crypto.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/net/registry.h"
#include "seedd/json_text.h"
#include "seedd/weights.h"

namespace seedd {

bool IsZoneName(std::string_view z) {
  if (z.size() > 64) return false;
  for (char c : z) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

namespace {

bool IsRootDigest(std::string_view s) { return ValidatePin(s, "root digest").ok(); }

// Field `key` of `j` as T, or InvalidArgument naming it.
template <typename T>
Status Take(const Json& j, const char* key, T* out, bool required = true) {
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(std::string("missing '") + key + "'") : Status::Ok();
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string() || it->get_ref<const std::string&>().size() > 256) {
      return Status::InvalidArgument(std::string("'") + key + "' is not a short string");
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean())
      return Status::InvalidArgument(std::string("'") + key + "' is not a boolean");
  } else if constexpr (std::is_same_v<T, double>) {
    if (!it->is_number())
      return Status::InvalidArgument(std::string("'") + key + "' is not a number");
  } else {
    if (!it->is_number_integer()) {
      return Status::InvalidArgument(std::string("'") + key + "' is not an integer");
    }
    if constexpr (std::is_unsigned_v<T>) {
      if (it->get<int64_t>() < 0) return Status::InvalidArgument(std::string("'") + key + "' < 0");
    }
  }
  *out = it->get<T>();
  return Status::Ok();
}

}  // namespace

Json FleetHostJson(const FleetHost& host) {
  Json models = Json::array();
  for (const FleetModel& m : host.models) {
    models.push_back({{"name", m.name},
                      {"root_digest", m.root_digest},
                      {"complete", m.complete},
                      {"bytes", m.bytes},
                      {"chunks", m.chunks},
                      {"chunks_served", m.chunks_served}});
  }
  Json pulls = Json::array();
  for (const FleetPull& p : host.pulls) {
    Json e = {{"model", p.model},
              {"root_digest", p.root_digest},
              {"state", p.state},
              {"bytes_total", p.bytes_total},
              {"bytes_verified", p.bytes_verified}};
    if (!p.preheat.empty()) e["preheat"] = p.preheat;
    pulls.push_back(std::move(e));
  }
  return Json{{"zone", host.zone},
              {"ready", host.ready},
              {"models", std::move(models)},
              {"pulls", std::move(pulls)},
              {"updated_ms", SwarmRegistry::NowMs()}};
}

Result<FleetHost> ParseFleetHost(const std::string& addr, const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a host's status is not an object");
  FleetHost h;
  h.addr = addr;
  SEEDD_RETURN_IF_ERROR(Take(j, "zone", &h.zone, false));
  SEEDD_RETURN_IF_ERROR(Take(j, "ready", &h.ready, false));
  int64_t updated = 0;
  SEEDD_RETURN_IF_ERROR(Take(j, "updated_ms", &updated));
  h.age_seconds =
      std::max<double>(0, static_cast<double>(SwarmRegistry::NowMs() - updated) / 1000.0);
  auto models = j.find("models");
  if (models == j.end() || !models->is_array() || models->size() > 1024) {
    return Status::InvalidArgument("'models' is not an array of at most 1024");
  }
  for (const Json& m : *models) {
    if (!m.is_object()) return Status::InvalidArgument("a model is not an object");
    FleetModel fm;
    SEEDD_RETURN_IF_ERROR(Take(m, "name", &fm.name));
    SEEDD_RETURN_IF_ERROR(Take(m, "root_digest", &fm.root_digest));
    SEEDD_RETURN_IF_ERROR(Take(m, "complete", &fm.complete));
    SEEDD_RETURN_IF_ERROR(Take(m, "bytes", &fm.bytes));
    SEEDD_RETURN_IF_ERROR(Take(m, "chunks", &fm.chunks));
    SEEDD_RETURN_IF_ERROR(Take(m, "chunks_served", &fm.chunks_served));
    if (!IsModelName(fm.name) || !IsRootDigest(fm.root_digest)) {
      return Status::InvalidArgument("a model's name or root digest is malformed");
    }
    h.models.push_back(std::move(fm));
  }
  auto pulls = j.find("pulls");
  if (pulls == j.end() || !pulls->is_array() || pulls->size() > 1024) {
    return Status::InvalidArgument("'pulls' is not an array of at most 1024");
  }
  for (const Json& p : *pulls) {
    if (!p.is_object()) return Status::InvalidArgument("a pull is not an object");
    FleetPull fp;
    SEEDD_RETURN_IF_ERROR(Take(p, "model", &fp.model));
    SEEDD_RETURN_IF_ERROR(Take(p, "root_digest", &fp.root_digest));
    SEEDD_RETURN_IF_ERROR(Take(p, "state", &fp.state));
    SEEDD_RETURN_IF_ERROR(Take(p, "bytes_total", &fp.bytes_total));
    SEEDD_RETURN_IF_ERROR(Take(p, "bytes_verified", &fp.bytes_verified));
    SEEDD_RETURN_IF_ERROR(Take(p, "preheat", &fp.preheat, false));
    h.pulls.push_back(std::move(fp));
  }
  return h;
}

Result<std::vector<FleetHost>> ReadFleet(const std::string& registry_url) {
  Result<std::shared_ptr<SwarmRegistry>> registry = SwarmRegistry::Open(registry_url);
  if (!registry.ok()) return registry.status();
  Result<std::vector<std::pair<std::string, std::string>>> hosts = (*registry)->Hosts();
  if (!hosts.ok()) return hosts.status();
  std::vector<FleetHost> out;
  for (const auto& [addr, text] : *hosts) {
    Result<Json> j = ParseJson(text);
    if (!j.ok()) continue;
    Result<FleetHost> h = ParseFleetHost(addr, *j);
    if (h.ok()) out.push_back(std::move(*h));
  }
  return out;
}

Result<PreheatEntry> ParsePreheat(const std::string& id, const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a preheat request is not an object");
  PreheatEntry e;
  e.id = id;
  SEEDD_RETURN_IF_ERROR(Take(j, "model", &e.model));
  SEEDD_RETURN_IF_ERROR(Take(j, "root_digest", &e.root_digest, false));
  SEEDD_RETURN_IF_ERROR(Take(j, "zone", &e.zone, false));
  SEEDD_RETURN_IF_ERROR(Take(j, "places", &e.places));
  SEEDD_RETURN_IF_ERROR(Take(j, "expires_ms", &e.expires_ms));
  if (!IsModelName(e.model)) return Status::InvalidArgument("'model' is not a model name");
  if (!e.root_digest.empty() && !IsRootDigest(e.root_digest)) {
    return Status::InvalidArgument("'root_digest' is not 64 lowercase hex digits");
  }
  if (!IsZoneName(e.zone)) return Status::InvalidArgument("'zone' is malformed");
  return e;
}

Result<PreheatTicket> RequestPreheat(const std::string& registry_url,
                                     const PreheatRequest& request) {
  if (!IsModelName(request.model)) {
    return Status::InvalidArgument("'" + request.model + "' is not a model name");
  }
  if (!request.root_digest.empty() && !IsRootDigest(request.root_digest)) {
    return Status::InvalidArgument("the root digest must be 64 lowercase hex digits");
  }
  if (!IsZoneName(request.zone)) {
    return Status::InvalidArgument("zone '" + request.zone + "': letters, digits, - _ . only");
  }
  if (request.percent < 0 || request.percent > 100) {
    return Status::InvalidArgument("percent must be within 0-100");
  }
  if (request.count > 0 && request.percent > 0) {
    return Status::InvalidArgument("a count or a percent, not both");
  }
  Result<std::vector<FleetHost>> fleet = ReadFleet(registry_url);
  if (!fleet.ok()) return fleet.status();
  PreheatTicket ticket;
  ticket.live_hosts = fleet->size();
  for (const FleetHost& h : *fleet) {
    if (request.zone.empty() || h.zone == request.zone) ++ticket.matching_hosts;
  }
  if (ticket.matching_hosts == 0) {
    return Status::FailedPrecondition(
        std::to_string(ticket.live_hosts) + " live host(s) in the registry, none " +
        (request.zone.empty() ? std::string("at all") : "in zone '" + request.zone + "'") +
        ": nothing would pull " + request.model);
  }
  if (request.count > 0) {
    ticket.places = request.count;
  } else if (request.percent > 0) {
    ticket.places = static_cast<uint64_t>(
        std::ceil(static_cast<double>(ticket.matching_hosts) * request.percent / 100.0));
  }
  ticket.id = RandomHexOrDie(8);
  Json j = {
      {"model", request.model},
      {"root_digest", request.root_digest},
      {"zone", request.zone},
      {"places", ticket.places},
      {"expires_ms", SwarmRegistry::NowMs() + std::chrono::milliseconds(request.ttl).count()}};
  Result<std::shared_ptr<SwarmRegistry>> registry = SwarmRegistry::Open(registry_url);
  if (!registry.ok()) return registry.status();
  SEEDD_RETURN_IF_ERROR((*registry)->AddPreheat(ticket.id, DumpJson(j)));
  return ticket;
}

}  // namespace seedd
