#include "transport/exchange.h"

#include "common/crypto.h"
#include "common/metrics.h"
#include "seedd/json_text.h"
#include "transport/data_auth.h"
#include "wire/frame.h"

namespace seedd {

ControlExchange::ControlExchange(SeedServer::Rep& rep, std::string peer, std::string binding)
    : rep_(rep), peer_(std::move(peer)), binding_(std::move(binding)) {}

ControlExchange::Step ControlExchange::OnFrame(std::string_view body) {
  Result<Json> request = ParseJson(body);
  if (!request.ok()) {
    metrics::Request("unknown", "invalid");
    return Refuse("Invalid request: " + request.status().message());
  }
  if (!challenged_.is_null()) {  // `request` is the fetcher's proof
    const std::string proof =
        request->is_object() && request->contains("proof") && (*request)["proof"].is_string()
            ? (*request)["proof"].get<std::string>()
            : std::string();
    Json asked = std::move(challenged_);
    challenged_ = Json();
    if (!ProvedByAny(rep_.handler.tokens(), proof, "fetcher", asked, nonce_, binding_)) {
      return RefuseUnauthorized(asked);
    }
    return OnAuthenticated(std::move(asked));
  }
  if (rep_.handler.Authenticate(*request)) return OnAuthenticated(std::move(*request));
  if (AsksForChallenge(*request) && rep_.FindStream(*request) != nullptr) {
    nonce_ = RandomHexOrDie(kDataNonceHexBytes / 2);
    Step step;
    step.next = Next::kChallenge;
    step.frame = EncodeJsonFrame(Json{
        {"status", "challenge"},
        {"auth", kDataAuthScheme},
        {"nonce", nonce_},
        {"proof", DataProof(rep_.handler.tokens().Sent(), "source", *request, nonce_, binding_)}});
    challenged_ = std::move(*request);
    return step;
  }
  return RefuseUnauthorized(*request);
}

ControlExchange::Step ControlExchange::OnAuthenticated(Json request) {
  authenticated_ = true;
  rep_.limits.Authenticated(peer_);
  if (auto kind = request.find("kind"); kind != request.end() && kind->is_string()) {
    kind_ = kind->get<std::string>().substr(0, 64);
  }
  metric_kind_ = KnownKind(rep_.handler, rep_.options, request);
  Step step;
  step.request = std::move(request);
  if (const StreamHandler* stream = rep_.FindStream(step.request)) {
    if (!rep_.limits.AdmitStream(peer_)) {
      rep_.busy_streams.Warn("Refused a data connection from {}: it holds {}, the limit", peer_,
                             rep_.options.max_streams_per_address);
      metrics::ConnectionRefused("data_per_address");
      metrics::Request(metric_kind_, "busy");
      return Refuse("too many data connections from " + peer_ + " (at most " +
                        std::to_string(rep_.options.max_streams_per_address) + ")",
                    /*busy=*/true);
    }
    metrics::Request(metric_kind_, "data");
    step.next = Next::kStream;
    step.stream = stream;
    return step;
  }
  step.next = Next::kResolve;
  return step;
}

std::string ControlExchange::Answered(const std::string& frame) const {
  const std::string outcome = Outcome(frame);
  metrics::Request(metric_kind_, outcome);
  metrics::BytesSent(metrics::Plane::kControl, frame.size());
  return outcome;
}

ControlExchange::Step ControlExchange::Refuse(const std::string& message, bool busy) {
  refusal_ = "error: " + message.substr(0, 80);
  Json response = ErrorResponse(message);
  // A refusal for capacity: "retry_ms" says when to try again, and that the
  // peer did nothing wrong (a fetcher does not count it against this source).
  if (busy) response["retry_ms"] = kBusyRetryMs;
  Step step;
  step.frame = EncodeJsonFrame(response);
  metrics::BytesSent(metrics::Plane::kControl, step.frame.size());
  return step;
}

ControlExchange::Step ControlExchange::RefuseUnauthorized(const Json& request) {
  metrics::AuthFailure();
  metrics::Request(KnownKind(rep_.handler, rep_.options, request), "unauthorized");
  const size_t failures = rep_.limits.AuthFailed(peer_, AddressLimits::Clock::now());
  rep_.failed_auth.Warn("Failed authentication from {} ({} in the last {} s)", peer_, failures,
                        Seconds(rep_.limits.options().auth_failure_window));
  return Refuse("Unauthorized request");
}

}  // namespace seedd
