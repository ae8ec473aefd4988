#include "common/mutex.h"
#include "daemon/daemon_rep.h"
#include "seedd/json_text.h"
#include "seedd/store_registry.h"
#include "seedd/weights.h"

namespace seedd {

void Daemon::Rep::RecordWarmup(WarmupRecord record) {
  MutexLock lock(warmups_mu_);
  for (WarmupRecord& w : warmups_) {
    if (w.kind == record.kind) {
      w = std::move(record);
      return;
    }
  }
  warmups_.push_back(std::move(record));
}

std::optional<HostPort> Daemon::admin_address() const {
  if (rep_->admin_ == nullptr) return std::nullopt;
  return rep_->admin_->address();
}

Json Daemon::StatusJson() const {
  Json models = Json::array();
  if (rep_->weights_ != nullptr) {
    for (const auto& m : rep_->weights_->Models()) {
      const uint64_t chunks = m->manifest.chunks.size();
      const uint64_t have = m->available == nullptr ? chunks : m->available->Count();
      Json signed_by = Json::array();  // checked on install when this daemon has --trust-key
      for (const Signature& s : m->manifest.signatures) signed_by.push_back(s.key);
      models.push_back({{"name", m->manifest.model},
                        {"root_digest", m->manifest.root_digest},
                        {"files", m->manifest.files.size()},
                        {"bytes", m->manifest.total_size},
                        {"chunks", chunks},
                        {"chunks_served", have},
                        {"complete", m->available == nullptr},
                        {"pulled", m->pulled},
                        {"chunk_digest", std::string(ChunkDigestName(m->manifest.chunk_digest))},
                        {"signed_by", std::move(signed_by)}});
    }
  }
  Json pulls = Json::array();
  for (const PullBoard::Entry& p : rep_->pulls_->Snapshot()) {
    const double fetched = static_cast<double>(p.verified_bytes - p.resumed_bytes);
    Json entry = {{"model", p.model},
                  {"root_digest", p.root_digest},
                  {"state", p.state},
                  {"bytes_total", p.total_bytes},
                  {"bytes_verified", p.verified_bytes},
                  {"bytes_resumed", p.resumed_bytes},
                  {"seconds", p.seconds},
                  {"rate_bytes_per_second", p.seconds > 0 ? fetched / p.seconds : 0.0},
                  {"sources", p.seeds},
                  {"relays", p.relays}};
    if (!p.error.empty()) entry["error"] = p.error;
    pulls.push_back(std::move(entry));
  }
  Json warmups = Json::array();
  {
    MutexLock lock(rep_->warmups_mu_);
    for (const Rep::WarmupRecord& w : rep_->warmups_) {
      Json entry = {{"kind", w.kind}, {"state", w.state}, {"seconds", w.seconds}};
      if (!w.source.empty()) entry["source"] = w.source;
      if (!w.error.empty()) entry["error"] = w.error;
      warmups.push_back(std::move(entry));
    }
  }
  Json stores =
      Json::array({{{"backend", "disk"}, {"location", rep_->options_.cache_dir.string()}}});
  for (const std::string& url : rep_->options_.store_urls) {
    stores.push_back(
        {{"backend", url.substr(0, url.find("://"))}, {"location", RedactStoreUrl(url)}});
  }
  // The fleet as the registry has it (each daemon's own status, a second old at most).
  Json fleet = Json::array();
  if (rep_->registry_ != nullptr) {
    Result<std::vector<std::pair<std::string, std::string>>> read = rep_->registry_->Hosts();
    std::vector<std::pair<std::string, std::string>> hosts;
    if (read.ok()) hosts = std::move(*read);
    for (const auto& [addr, text] : hosts) {
      Result<Json> j = ParseJson(text);
      if (!j.ok()) continue;
      Result<FleetHost> h = ParseFleetHost(addr, *j);
      if (!h.ok()) continue;
      Json e = FleetHostJson(*h);
      e.erase("updated_ms");
      e["addr"] = h->addr;
      e["age_seconds"] = h->age_seconds;
      fleet.push_back(std::move(e));
    }
  }
  return Json{{"ready", ready()},
              {"zone", rep_->options_.zone},
              {"fleet", std::move(fleet)},
              {"listen", rep_->bound_.has_value() ? rep_->bound_->ToString() : ""},
              {"models", std::move(models)},
              {"pulls", std::move(pulls)},
              {"warmups", std::move(warmups)},
              {"usage", rep_->usage_ != nullptr ? rep_->usage_->SnapshotJson() : Json::array()},
              {"stores", std::move(stores)}};
}

}  // namespace seedd
