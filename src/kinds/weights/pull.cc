// The one pull pipeline (pull.h), and PullModel (seedd/weights.h) on it: the
// manifest from the sources, retried while they are down, then FetchModel.
#include "kinds/weights/pull.h"

#include <algorithm>
#include <map>
#include <optional>

#include "common/backoff.h"
#include "kinds/weights/progress_log.h"
#include "kinds/weights/weight_shards_kind.h"
#include "origins/origin.h"
#include "seedd/logging.h"
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
  std::string from;        // the source that sent it
  bool all_missed = true;  // every source answered "miss"
  std::string refusal;     // the last source's refusal (an error answer, a bad manifest)
  std::string why;         // why no source answered
};

ManifestRound AskManifest(const PullPlan& plan) {
  ManifestRound round;
  ExchangeOptions exchange;
  exchange.tls = plan.tls;
  exchange.first_byte_timeout = kManifestFirstByte;
  exchange.max_response_bytes = kMaxResponseBytes;
  exchange.cancel = plan.cancel;
  for (const auto& source : plan.sources) {
    if (plan.cancel != nullptr && plan.cancel->load()) break;
    const std::string token = plan.tokens != nullptr ? plan.tokens->Sent() : std::string();
    Json request{{"kind", std::string(kWeightShardsKind)},
                 {"model", plan.model},
                 {"token", token.empty() ? plan.token : token}};
    if (!plan.relay.empty()) request["relay"] = plan.relay;
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
      round.refusal = source.ToString() + " answered: " + ExplainSourceError(*response);
      continue;
    }
    Result<Manifest> parsed = ParseManifest((*response)["payload"]);
    if (!parsed.ok()) {
      round.refusal = source.ToString() + " sent a bad manifest: " + parsed.status().message();
      continue;
    }
    if (Status offered =
            CheckOffered(*parsed, plan.model, plan.pin, plan.trust.get(), source.ToString());
        !offered.ok()) {
      round.refusal = offered.message();
      continue;
    }
    round.manifest = std::move(*parsed);
    round.from = source.ToString();
    return round;
  }
  return round;
}

bool Cancelled(const std::shared_ptr<const std::atomic<bool>>& cancel) {
  return cancel != nullptr && cancel->load();
}

std::string Seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(ms.count()) / 1000);
  return text;
}

}  // namespace

Status CheckOffered(const Manifest& m, const std::string& model, const std::string& pin,
                    const TrustedKeys* trust, const std::string& from) {
  if (m.model != model) {
    return Status::FailedPrecondition(from + " sent the manifest of model '" + m.model +
                                      "', not '" + model + "'");
  }
  SEEDD_RETURN_IF_ERROR(CheckManifestSigned(m, trust, from));
  return CheckPinned(m, pin);
}

Status RunPull(const PullPlan& plan, const std::function<Status(const Manifest&)>& install) {
  auto stopped = [&] {
    return plan.stopped ? plan.stopped()
                        : Status::Cancelled("the pull was stopped before it began");
  };
  RetryRounds rounds(plan.deadline, [&] { return Cancelled(plan.cancel); });
  std::string fallback_problem;
  for (;;) {
    std::string why;
    bool installing = false;
    ManifestRound asked = AskManifest(plan);
    if (asked.manifest.has_value()) {
      installing = true;
      Status st;
      {
        LogFields fields{{"seed_kind", std::string(kWeightShardsKind)}, {"source", asked.from}};
        st = install(*asked.manifest);
      }
      if (st.ok() || st.code() == StatusCode::kCancelled) return st;
      // Every source failed mid-pull: they may come back. Anything else is final,
      // unless the caller keeps trying.
      if (st.code() != StatusCode::kUnavailable && !plan.retry_refusals) return st;
      why = st.code() == StatusCode::kUnavailable
                ? "every source failed before the model was complete"
                : "the pull failed (" + st.message() + ")";
    } else if (Cancelled(plan.cancel)) {
      return stopped();
    } else if (!asked.refusal.empty()) {
      if (!plan.retry_refusals) return Status::FailedPrecondition(asked.refusal);
      why = "a source refused (" + asked.refusal + ")";
    } else if (asked.all_missed) {
      return Status::NotFound("no source serves model '" + plan.model + "'");
    } else {
      why = "no source answered (" + asked.why + ")";
    }
    if (rounds.round() == 1 && plan.after_first_round) {
      Status fallback = plan.after_first_round();
      if (fallback.ok()) return fallback;
      if (fallback.code() != StatusCode::kNotFound) fallback_problem = "; " + fallback.message();
    }
    const bool waited = rounds.WaitBeforeNext(
        [&](RetryRounds::Clock::duration wait, RetryRounds::Clock::duration left) {
          if (plan.on_retry) {
            plan.on_retry(why, std::chrono::duration_cast<std::chrono::milliseconds>(wait),
                          rounds.round() + 1,
                          std::chrono::duration_cast<std::chrono::milliseconds>(left));
          }
        });
    if (Cancelled(plan.cancel)) return stopped();
    if (!waited) {
      const std::string text = why + "; gave up after " + plan.deadline_text + fallback_problem;
      return installing ? Status::DeadlineExceeded(text) : Status::Unavailable(text);
    }
  }
}

namespace {

// The sources' manifest `m` against the upstream's listing `up` (PullOptions::
// upstream): the same files, each of its upstream size and SHA-256; a file the
// upstream gives an MD5 for (an S3 ETag) goes to *md5, to be checked once
// fetched (the manifest carries no MD5).
Status MatchUpstream(const Manifest& m, const OriginModel& up,
                     std::map<std::string, std::string>* md5) {
  const std::string from = " (" + up.url + ", " + up.version + ")";
  std::map<std::string, const OriginFile*> listed;
  for (const OriginFile& f : up.files) listed.emplace(f.path, &f);
  for (const ManifestFile& f : m.files) {
    auto it = listed.find(f.path);
    if (it == listed.end()) {
      return Status::FailedPrecondition("the manifest names " + f.path +
                                        ", which the upstream does not" + from);
    }
    const OriginFile& u = *it->second;
    if (u.size != f.size) {
      return Status::FailedPrecondition(f.path + ": " + std::to_string(f.size) +
                                        " bytes in the manifest, " + std::to_string(u.size) +
                                        " upstream" + from);
    }
    if (u.digest.rfind("md5:", 0) == 0) {
      (*md5)[f.path] = u.digest.substr(4);
      listed.erase(it);
      continue;
    }
    if (u.digest.rfind("sha256:", 0) != 0) {
      return Status::FailedPrecondition(f.path + ": the upstream names no SHA-256 or MD5 for it (" +
                                        (u.digest.empty() ? std::string("no digest") : u.digest) +
                                        "), so it cannot vouch for the bytes" + from);
    }
    if (u.digest != "sha256:" + f.sha256) {
      return Status::FailedPrecondition(f.path + ": the manifest says sha256:" + f.sha256 +
                                        ", the upstream " + u.digest + from + "; nothing fetched");
    }
    listed.erase(it);
  }
  if (!listed.empty()) {
    return Status::FailedPrecondition("the manifest lacks " + listed.begin()->first +
                                      ", which the upstream has" + from);
  }
  return Status::Ok();
}

}  // namespace

Result<PullResult> PullModel(const std::string& model, const std::filesystem::path& into,
                             const PullOptions& o) {
  if (!IsModelName(model)) return Status::InvalidArgument("invalid model name '" + model + "'");
  if (into.empty()) return Status::InvalidArgument("the destination is empty");
  if (o.sources.empty()) return Status::InvalidArgument("no source to pull from");
  PullPlan plan;
  for (const auto& s : o.sources) {
    Result<HostPort> hp = ParseHostPort(s);
    if (!hp.ok()) return Status::InvalidArgument("source '" + s + "': " + hp.status().message());
    plan.sources.push_back(*hp);
  }
  if (!o.root_digest.empty()) SEEDD_RETURN_IF_ERROR(ValidatePin(o.root_digest, "root digest"));
  if (!o.order.empty() && o.order != "index") {
    return Status::InvalidArgument("order '" + o.order + "': expected \"index\" or none");
  }
  const auto start = Clock::now();
  plan.model = model;
  plan.pin = o.root_digest;
  plan.token = o.token;
  plan.tls = o.tls;
  plan.cancel = o.cancel;
  plan.trust = o.trust;
  plan.deadline = start + o.timeout;
  plan.deadline_text = Seconds(o.timeout) + " s";
  plan.on_retry = o.on_retry;
  plan.stopped = [] {
    return Status::Cancelled("the pull was stopped while waiting for the sources");
  };
  // The upstream's listing, read once: what the sources' manifest must match.
  std::optional<OriginModel> upstream;
  if (!o.upstream.empty()) {
    Result<OriginPtr> origin = OpenOrigin(o.upstream, o.upstream_access);
    if (!origin.ok()) return origin.status();
    Result<OriginModel> listing = (*origin)->Resolve();
    if (!listing.ok()) return listing.status().WithContext("the upstream to verify against");
    upstream = std::move(*listing);
  }
  PullResult result;
  Status pulled = RunPull(plan, [&](const Manifest& m) {
    FetchOptions options;
    if (upstream) SEEDD_RETURN_IF_ERROR(MatchUpstream(m, *upstream, &options.upstream_md5));
    options.token = o.token;
    options.tls = o.tls;
    options.connections_per_source = std::max(1, o.connections);
    options.max_neighbours = o.max_neighbours;
    options.verify_sha256 = o.verify_sha256 || upstream.has_value();
    options.replace = o.replace;
    options.reuse_from = o.reuse_from;
    options.cancel = o.cancel;
    options.in_order = o.order == "index";
    result.stats = FetchStats{};
    ProgressLog log(model, m.total_size);
    std::filesystem::path staging;
    std::vector<std::string> ready;  // since the last progress call
    options.staged = [&](const std::filesystem::path& dir) { staging = dir; };
    options.file_ready = [&](const std::string& path) { ready.push_back(path); };
    options.progress = [&](uint64_t done) {  // the fetch's lock is held: stats are stable
      // Chunks copied locally count as resumed: not moved over the network.
      const uint64_t local = result.stats.bytes_resumed + result.stats.bytes_reused;
      log.Update(done, local, result.stats.used.size());
      if (o.progress) {
        PullProgress p;
        p.verified_bytes = done;
        p.total_bytes = m.total_size;
        p.resumed_bytes = local;
        p.sources = result.stats.used.size();
        p.files_ready.swap(ready);
        p.staging = staging;
        o.progress(p);
      }
    };
    SEEDD_RETURN_IF_ERROR(FetchModel(m, plan.sources, into, options, &result.stats));
    result.manifest = m;
    return Status::Ok();
  });
  if (!pulled.ok()) return pulled;
  const Manifest& m = result.manifest;
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

}  // namespace seedd
