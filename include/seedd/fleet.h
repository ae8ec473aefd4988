// The fleet as its registry sees it (seedd --registry redis://...): every
// daemon publishes what it holds and pulls every second or so, and takes
// preheat requests from there. `seedctl status --fleet` and `seedctl preheat`
// are built on these; docs/operations.md, "Preheat and the fleet's status".
//
// Layout, beside the swarms' keys (under the URL's prefix): seedd:host:<addr>
// (a daemon's status, JSON, expiring 10 s after its last update) listed in the
// sorted set seedd:hosts; seedd:preheat, a hash of request id -> JSON; and
// seedd:preheat:<id>, the set of hosts that took one of a request's places.
// Everything read back is peer input: bounded and checked before use.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

struct FleetModel {
  std::string name;
  std::string root_digest;
  bool complete = false;
  uint64_t bytes = 0;
  uint64_t chunks = 0;
  uint64_t chunks_served = 0;  // verified so far (= chunks once complete)
};

struct FleetPull {
  std::string model;
  std::string root_digest;
  std::string state;  // "pulling", "done", "failed"
  uint64_t bytes_total = 0;
  uint64_t bytes_verified = 0;
  std::string preheat;  // the preheat request it answers, if any
};

struct FleetHost {
  std::string addr;  // where its data plane is reached (its --advertise)
  std::string zone;  // its --zone, "" when none
  bool ready = false;
  std::vector<FleetModel> models;
  std::vector<FleetPull> pulls;
  double age_seconds = 0;  // since it last published
};

// A zone's name: at most 64 letters, digits, '-', '_' and '.' (empty: none).
bool IsZoneName(std::string_view zone);

// A host's status as published (FleetAgent) and read back.
Json FleetHostJson(const FleetHost& host);
// The status a host published; InvalidArgument naming the field when it is not one.
Result<FleetHost> ParseFleetHost(const std::string& addr, const Json& j);

// The live hosts of the fleet the registry at `registry_url` tracks, by address.
Result<std::vector<FleetHost>> ReadFleet(const std::string& registry_url);

struct PreheatRequest {
  std::string model;
  std::string root_digest;  // empty: whatever version the daemons' sources serve
  // Which daemons pull it: `count` of them, or `percent` of the live hosts
  // (rounded up), or every one in `zone`; a zone and a count or percent
  // together: that many of the zone's. No bound at all: every host.
  uint64_t count = 0;
  double percent = 0;
  std::string zone;
  std::chrono::seconds ttl{3600};  // the request lapses after this
};

struct PreheatTicket {
  std::string id;       // the request's id in the registry
  uint64_t places = 0;  // hosts that will pull it (0: every matching host)
  size_t live_hosts = 0;
  size_t matching_hosts = 0;  // live hosts in the zone (all without one)
};

// Asks the fleet's daemons to pull `request.model` now: written to the
// registry, where each daemon finds it within about a second; each that
// matches the zone takes one of the places until they are gone and pulls the
// model from its sources (a daemon already holding the version takes a place
// and pulls nothing). InvalidArgument for a bad model name, root digest, count
// or percent; FailedPrecondition when no live host matches.
Result<PreheatTicket> RequestPreheat(const std::string& registry_url,
                                     const PreheatRequest& request);

// A preheat request as published and read back (its text is peer input).
struct PreheatEntry {
  std::string id;
  std::string model;
  std::string root_digest;
  std::string zone;
  uint64_t places = 0;
  int64_t expires_ms = 0;  // since the Unix epoch
};
Result<PreheatEntry> ParsePreheat(const std::string& id, const Json& j);

}  // namespace seedd
