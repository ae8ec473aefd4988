#include "daemon/fleet_agent.h"

#include "kinds/weights/net/registry.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"

namespace seedd {
FleetAgent::FleetAgent(std::shared_ptr<SwarmRegistry> registry, Options options, Describe describe,
                       Holds holds, Pull pull)
    : registry_(std::move(registry)),
      options_(std::move(options)),
      describe_(std::move(describe)),
      holds_(std::move(holds)),
      pull_(std::move(pull)),
      thread_([this] { Loop(); }) {}

FleetAgent::~FleetAgent() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void FleetAgent::Loop() {
  MutexLock lock(mu_);
  while (!stop_) {
    lock.Unlock();
    Turn();
    lock.Lock();
    stop_cv_.wait_for(lock, options_.interval, [&]() REQUIRES(mu_) { return stop_; });
  }
}

void FleetAgent::Turn() {
  FleetHost me = describe_();
  me.zone = options_.zone;
  Status put = registry_->PutHost(options_.addr, DumpJson(FleetHostJson(me)), options_.host_ttl);
  Result<std::vector<std::pair<std::string, std::string>>> requests =
      put.ok() ? registry_->Preheats()
               : Result<std::vector<std::pair<std::string, std::string>>>(put);
  if (!requests.ok()) {
    if (!failing_) {
      Logger().warn("Fleet registry {}: {} (retrying every second)", registry_->Describe(),
                    requests.status().message());
    }
    failing_ = true;
    return;
  }
  if (failing_) Logger().info("Fleet registry {}: reachable again", registry_->Describe());
  failing_ = false;
  const int64_t now = SwarmRegistry::NowMs();
  for (const auto& [id, text] : *requests) {
    if (handled_.count(id) != 0) continue;
    Result<Json> j = ParseJson(text);
    Result<PreheatEntry> e = j.ok() ? ParsePreheat(id, *j) : Result<PreheatEntry>(j.status());
    if (!e.ok()) {
      handled_.insert(id);
      Logger().warn("Preheat request {} in the registry is malformed ({}): ignored", id,
                    e.status().message());
      continue;
    }
    if (e->expires_ms <= now) {
      handled_.insert(id);
      (void)registry_->DropPreheat(id);
      continue;
    }
    handled_.insert(id);
    if (!e->zone.empty() && e->zone != options_.zone) continue;
    const std::chrono::milliseconds left(e->expires_ms - now);
    Result<bool> place = registry_->TakePlace(id, options_.addr, e->places, left);
    if (!place.ok()) {
      handled_.erase(id);  // asked again next turn
      continue;
    }
    if (!*place) {
      Logger().info("Preheat {} of model {}: its {} place(s) are taken", id, e->model, e->places);
      continue;
    }
    const std::string pull = e->root_digest.empty() ? e->model : e->model + "@" + e->root_digest;
    if (holds_(e->model, e->root_digest)) {
      Logger().info("Preheat {} of model {}: held here already", id, pull);
      continue;
    }
    Logger().info("Preheat {}: pulling model {}{}", id, pull,
                  e->places > 0 ? " (one of " + std::to_string(e->places) + " hosts)"
                                : std::string(" (every host") +
                                      (e->zone.empty() ? "" : " of zone " + e->zone) + ")");
    pull_(pull, id);
  }
}

}  // namespace seedd
