// A daemon's part in the fleet's registry (seedd/fleet.h): every second it
// publishes what it holds and pulls, and looks for preheat requests; for each
// new one whose zone is its own it takes a place (while any is left) and has
// the model pulled. Expired requests are dropped.
//
// Thread safety: owns its thread; the callbacks run on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "seedd/fleet.h"

namespace seedd {

class SwarmRegistry;

class FleetAgent {
 public:
  struct Options {
    std::string addr;  // this daemon's advertised data-plane address
    std::string zone;
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds host_ttl{10000};
  };
  // What this host holds and pulls now.
  using Describe = std::function<FleetHost()>;
  // Whether this host serves the version complete already (root "" : any).
  using Holds = std::function<bool(const std::string& model, const std::string& root)>;
  // Pulls NAME[@ROOT] in the background for request `id`.
  using Pull = std::function<void(const std::string& pull, const std::string& id)>;

  FleetAgent(std::shared_ptr<SwarmRegistry> registry, Options options, Describe describe,
             Holds holds, Pull pull);
  ~FleetAgent();

 private:
  void Loop();
  void Turn();

  const std::shared_ptr<SwarmRegistry> registry_;
  const Options options_;
  const Describe describe_;
  const Holds holds_;
  const Pull pull_;
  std::set<std::string> handled_;  // request ids seen (the thread's)
  bool failing_ = false;           // the registry is down (the thread's)
  Mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace seedd
