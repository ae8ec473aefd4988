#include "common/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

namespace seedd::metrics {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

struct Families {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& requests =
      BuildCounter()
          .Name("seedd_requests_total")
          .Help("Control-channel requests answered, by kind and outcome")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& auth_failures =
      BuildCounter()
          .Name("seedd_auth_failures_total")
          .Help("Requests refused for a missing or wrong token")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& connections_open =
      BuildGauge()
          .Name("seedd_connections_open")
          .Help(
              "Peer connections open now, by plane (control: a request being read or "
              "answered; data: a weight data connection)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& refused =
      BuildCounter()
          .Name("seedd_connections_refused_total")
          .Help("Peer connections refused by a limit, by reason")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& bytes_sent = BuildCounter()
                                                            .Name("seedd_bytes_sent_total")
                                                            .Help("Bytes sent to peers, by plane")
                                                            .Register(*registry);
  prometheus::Family<prometheus::Counter>& bytes_received =
      BuildCounter()
          .Name("seedd_bytes_received_total")
          .Help("Bytes received from peers, by plane")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& chunks_verified =
      BuildCounter()
          .Name("seedd_chunks_verified_total")
          .Help("Weight chunks fetched whose digest matched the manifest")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& chunk_failures =
      BuildCounter()
          .Name("seedd_chunk_verification_failures_total")
          .Help("Weight chunks fetched whose digest did not match (the sender is blamed)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& store_ops =
      BuildCounter()
          .Name("seedd_store_operations_total")
          .Help("Artifact store operations, by backend, operation and result")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& warmup =
      BuildHistogram()
          .Name("seedd_warmup_seconds")
          .Help("Warmups at start, by kind and where the state came from")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& pull_progress =
      BuildGauge()
          .Name("seedd_pull_progress_ratio")
          .Help("Share of a pulled model's bytes verified (1 once the pull completed)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& installed_files =
      BuildGauge()
          .Name("seedd_installed_files")
          .Help("Files a warmup installed for the engine, by cache (watched since)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& installed_opened =
      BuildGauge()
          .Name("seedd_installed_files_opened")
          .Help("Of the files a warmup installed, those another process opened since, by cache")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& preheat_pulls =
      BuildCounter()
          .Name("seedd_preheat_pulls_total")
          .Help("Pulls a preheat request started on this daemon, by outcome")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_bytes =
      BuildCounter()
          .Name("seedd_relay_bytes_sent_total")
          .Help("Weight bytes sent from models this daemon pulled (relayed to other fetchers)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& across_zones =
      BuildCounter()
          .Name("seedd_pull_bytes_across_zones_total")
          .Help(
              "Weight bytes this daemon's pulls received from sources of another zone (or of a "
              "zone not known), with --zone set")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_wait =
      BuildCounter()
          .Name("seedd_relay_upload_wait_seconds_total")
          .Help("Time upload threads waited to keep within --relay-upload-rate, summed")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_pace =
      BuildGauge()
          .Name("seedd_relay_upload_pace_bytes_per_second")
          .Help(
              "The rate relay uploads are held to, by --relay-upload-rate or by the queueing "
              "the uplink showed (0: not paced)")
          .Register(*registry);

  prometheus::Counter& auth_failure = auth_failures.Add({});
  prometheus::Gauge& open_control = connections_open.Add({{"plane", "control"}});
  prometheus::Gauge& open_data = connections_open.Add({{"plane", "data"}});
  prometheus::Counter& sent_control = bytes_sent.Add({{"plane", "control"}});
  prometheus::Counter& sent_data = bytes_sent.Add({{"plane", "data"}});
  prometheus::Counter& received_control = bytes_received.Add({{"plane", "control"}});
  prometheus::Counter& received_data = bytes_received.Add({{"plane", "data"}});
  prometheus::Counter& verified = chunks_verified.Add({});
  prometheus::Counter& failed = chunk_failures.Add({});
  prometheus::Counter& relayed = relay_bytes.Add({});
  prometheus::Counter& crossed = across_zones.Add({});
  prometheus::Counter& relay_waited = relay_wait.Add({});
  prometheus::Gauge& relay_paced = relay_pace.Add({});
};

Families& F() {
  static Families* families = new Families();  // never destroyed: used until exit
  return *families;
}

// Family::Add locks the family and hashes its labels; a counter, once made,
// lives as long as its family. So each thread keeps the counters it used by
// their label values (few: every label value here comes from a fixed set).
prometheus::Counter& Labelled(
    prometheus::Family<prometheus::Counter>& family,
    std::initializer_list<std::pair<const char*, std::string_view>> labels) {
  thread_local std::unordered_map<std::string, prometheus::Counter*> cache;
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(&family));
  for (const auto& [name, value] : labels) {
    key += '\x1f';
    key += value;
  }
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  std::map<std::string, std::string> all;
  for (const auto& [name, value] : labels) all.emplace(name, std::string(value));
  prometheus::Counter& counter = family.Add(all);
  cache.emplace(std::move(key), &counter);
  return counter;
}

}  // namespace

void Request(std::string_view kind, std::string_view outcome) {
  Labelled(F().requests, {{"kind", kind}, {"outcome", outcome}}).Increment();
}

void AuthFailure() { F().auth_failure.Increment(); }

void ConnectionOpened(Plane plane) {
  (plane == Plane::kControl ? F().open_control : F().open_data).Increment();
}

void ConnectionClosed(Plane plane) {
  (plane == Plane::kControl ? F().open_control : F().open_data).Decrement();
}

void ConnectionRefused(std::string_view reason) {
  Labelled(F().refused, {{"reason", reason}}).Increment();
}

void BytesSent(Plane plane, uint64_t bytes) {
  (plane == Plane::kControl ? F().sent_control : F().sent_data)
      .Increment(static_cast<double>(bytes));
}

void BytesReceived(Plane plane, uint64_t bytes) {
  (plane == Plane::kControl ? F().received_control : F().received_data)
      .Increment(static_cast<double>(bytes));
}

void ChunkVerified() { F().verified.Increment(); }

void ChunkVerificationFailed() { F().failed.Increment(); }

void BytesAcrossZones(uint64_t bytes) { F().crossed.Increment(static_cast<double>(bytes)); }

void StoreOperation(std::string_view backend, std::string_view op, std::string_view result) {
  Labelled(F().store_ops, {{"backend", backend}, {"op", op}, {"result", result}}).Increment();
}

void Warmup(std::string_view kind, std::string_view source, double seconds) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800};
  F().warmup.Add({{"kind", std::string(kind)}, {"source", std::string(source)}}, kBuckets)
      .Observe(seconds);
}

void PullProgress(std::string_view model, double ratio) {
  F().pull_progress.Add({{"model", std::string(model)}}).Set(ratio);
}

void InstalledFiles(std::string_view cache, uint64_t installed, uint64_t opened) {
  F().installed_files.Add({{"cache", std::string(cache)}}).Set(static_cast<double>(installed));
  F().installed_opened.Add({{"cache", std::string(cache)}}).Set(static_cast<double>(opened));
}

void PreheatPull(std::string_view outcome) {
  F().preheat_pulls.Add({{"outcome", std::string(outcome)}}).Increment();
}

void RelayBytesSent(uint64_t bytes) { F().relayed.Increment(static_cast<double>(bytes)); }

void RelayUploadWaited(double seconds) { F().relay_waited.Increment(seconds); }

void RelayUploadPace(uint64_t bytes_per_second) {
  F().relay_paced.Set(static_cast<double>(bytes_per_second));
}

std::string Text() {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(F().registry->Collect());
}

}  // namespace seedd::metrics
