// PullModel (seedd/weights.h): the manifest from the sources, retried while
// they are down, then FetchModel.
#include <algorithm>

#include "common/backoff.h"
#include "kinds/weights/progress_log.h"
#include "kinds/weights/weight_shards_kind.h"
#include "seedd/seed_transport.h"
#include "seedd/weights.h"
#include "transport/client.h"

namespace seedd {

namespace {

using Clock = std::chrono::steady_clock;

// Each manifest request's response must begin within this time.
// A daemon answers from the manifest it holds, in milliseconds: a port that
// stays silent this long is not a seedd daemon (or one in trouble), and the
// round reports it rather than keeping the user waiting.
constexpr std::chrono::milliseconds kManifestFirstByte{10000};

// What one round of asking the sources for the manifest found.
struct ManifestRound {
  std::optional<Manifest> manifest;
  bool all_missed = true;  // every source answered "miss"
  std::string error;       // the last source's error response (final), if any
  std::string why;         // why no source answered (retried)
};

ManifestRound AskManifest(const std::vector<HostPort>& sources, const PullOptions& o,
                          const std::string& model) {
  ManifestRound round;
  ExchangeOptions exchange;
  exchange.tls = o.tls;
  exchange.first_byte_timeout = kManifestFirstByte;
  exchange.max_response_bytes = kMaxResponseBytes;
  exchange.cancel = o.cancel;
  for (const auto& source : sources) {
    if (o.cancel != nullptr && o.cancel->load()) break;
    const Json request{{"kind", "weight_shards"}, {"model", model}, {"token", o.token}};
    Result<Json> response = ExchangeJson(source, request, exchange);
    if (response.ok() && !response->is_object()) {
      response = Status::DataLoss("sent a response that is not an object");
    }
    if (!response.ok()) {
      round.all_missed = false;
      round.why +=
          (round.why.empty() ? "" : "; ") + source.ToString() + ": " + response.status().message();
      continue;
    }
    const Json& status = (*response)["status"];
    if (status == "miss") continue;
    round.all_missed = false;
    if (status != "ok") {
      round.error = source.ToString() + " answered: " + ExplainSourceError(*response);
      continue;
    }
    Result<Manifest> parsed = ParseManifest((*response)["payload"]);
    if (!parsed.ok()) {
      round.error = source.ToString() + " sent a bad manifest: " + parsed.status().message();
      continue;
    }
    if (Status signed_by = CheckManifestSigned(*parsed, o.trust.get(), source.ToString());
        !signed_by.ok()) {
      round.error = signed_by.message();
      continue;
    }
    round.manifest = std::move(*parsed);
    return round;
  }
  return round;
}

bool Cancelled(const PullOptions& o) { return o.cancel != nullptr && o.cancel->load(); }

std::string Seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(ms.count()) / 1000);
  return text;
}

}  // namespace

Result<PullResult> PullModel(const std::string& model, const std::filesystem::path& into,
                             const PullOptions& o) {
  if (!IsModelName(model)) return Status::InvalidArgument("invalid model name '" + model + "'");
  if (into.empty()) return Status::InvalidArgument("the destination is empty");
  if (o.sources.empty()) return Status::InvalidArgument("no source to pull from");
  std::vector<HostPort> sources;
  for (const auto& s : o.sources) {
    Result<HostPort> hp = ParseHostPort(s);
    if (!hp.ok()) return Status::InvalidArgument("source '" + s + "': " + hp.status().message());
    sources.push_back(*hp);
  }
  if (!o.root_digest.empty()) SEEDD_RETURN_IF_ERROR(ValidatePin(o.root_digest, "root digest"));

  const auto start = Clock::now();
  RetryRounds rounds(start + o.timeout, [&] { return Cancelled(o); });
  for (;;) {
    std::string why;
    bool had_manifest = false;
    ManifestRound asked = AskManifest(sources, o, model);
    if (asked.manifest.has_value()) {
      had_manifest = true;
      const Manifest& m = *asked.manifest;
      SEEDD_RETURN_IF_ERROR(CheckPinned(m, o.root_digest));
      FetchOptions options;
      options.token = o.token;
      options.tls = o.tls;
      options.connections_per_source = std::max(1, o.connections);
      options.max_neighbours = o.max_neighbours;
      options.verify_sha256 = o.verify_sha256;
      options.replace = o.replace;
      options.cancel = o.cancel;
      PullResult result;
      ProgressLog log(model, m.total_size);
      options.progress = [&](uint64_t done) {  // the fetch's lock is held: stats are stable
        log.Update(done, result.stats.bytes_resumed, result.stats.used.size());
        if (o.progress) {
          o.progress(PullProgress{done, m.total_size, result.stats.bytes_resumed,
                                  result.stats.used.size()});
        }
      };
      Status st = FetchModel(m, sources, into, options, &result.stats);
      if (st.ok()) {
        result.manifest = m;
        result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        LogFields fields{{"model", model},
                         {"root_digest", m.root_digest},
                         {"bytes", m.total_size},
                         {"seconds", result.seconds},
                         {"sources", result.stats.used.size()},
                         {"into", into.string()}};
        if (result.stats.up_to_date) {
          Logger().info("Model {} in {} is up to date (root digest {})", model, into.string(),
                        m.root_digest);
        } else {
          Logger().info("Pulled model {} ({}) into {} in {} from {} source(s)", model,
                        HumanBytes(m.total_size), into.string(), HumanSeconds(result.seconds),
                        result.stats.used.size());
        }
        return result;
      }
      // Every source failed mid-pull: they may come back. Anything else is final.
      if (st.code() != StatusCode::kUnavailable) return st;
      why = "every source failed before the model was complete";
    } else if (Cancelled(o)) {
      return Status::Cancelled("the pull was stopped before it began");
    } else if (!asked.error.empty()) {
      return Status::FailedPrecondition(asked.error);
    } else if (asked.all_missed) {
      return Status::NotFound("no source serves model '" + model + "'");
    } else {
      why = "no source answered (" + asked.why + ")";
    }
    const bool waited = rounds.WaitBeforeNext([&](Clock::duration wait, Clock::duration left) {
      if (o.on_retry) {
        o.on_retry(why, std::chrono::duration_cast<std::chrono::milliseconds>(wait),
                   rounds.round() + 1, std::chrono::duration_cast<std::chrono::milliseconds>(left));
      }
    });
    if (!waited) {
      const std::string text = why + "; gave up after " + Seconds(o.timeout) + " s";
      return had_manifest ? Status::DeadlineExceeded(text) : Status::Unavailable(text);
    }
    if (Cancelled(o))
      return Status::Cancelled("the pull was stopped while waiting for the sources");
  }
}

}  // namespace seedd
