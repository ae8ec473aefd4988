#include "seedd/seed_transport.h"

#include <mutex>

#include "common/mutex.h"
#include "seedd/logging.h"
#include "transport/client.h"
#include "transport/handler.h"
#include "transport/server.h"

namespace seedd {

struct SeedTransport::Rep {
  Rep(std::vector<SeedablePtr> seedables, SeedConfig c, TransportOptions o)
      : config(std::move(c)),
        options(std::move(o)),
        tokens(options.tokens != nullptr
                   ? options.tokens
                   : std::make_shared<const TokenRing>(std::vector<std::string>{config.token})),
        handler(std::move(seedables), tokens) {}

  const SeedConfig config;
  const TransportOptions options;
  const std::shared_ptr<const TokenRing> tokens;
  const RequestHandler handler;
  Mutex mu;
  std::unique_ptr<SeedServer> server GUARDED_BY(mu);
  std::unique_ptr<SeedServer> plain_server GUARDED_BY(mu);
  TransportOptions plain_options;  // options without TLS, for plain_server
};

Result<std::unique_ptr<SeedTransport>> SeedTransport::Create(std::vector<SeedablePtr> seedables,
                                                             SeedConfig config,
                                                             TransportOptions options) {
  SEEDD_RETURN_IF_ERROR(config.Validate());
  for (size_t i = 0; i < seedables.size(); ++i) {
    for (size_t j = i + 1; j < seedables.size(); ++j) {
      if (seedables[i]->kind() == seedables[j]->kind()) {
        return Status::InvalidArgument("two seedables share the kind '" +
                                       std::string(seedables[i]->kind()) + "'");
      }
    }
  }
  if (options.min_resolver_threads == 0 || options.max_resolver_threads == 0 ||
      options.max_connections == 0) {
    return Status::InvalidArgument("resolver threads and max_connections must be positive");
  }
  return std::unique_ptr<SeedTransport>(
      new SeedTransport(std::make_unique<Rep>(std::move(seedables), std::move(config), options)));
}

SeedTransport::SeedTransport(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

SeedTransport::~SeedTransport() { Close(); }

Result<std::optional<HostPort>> SeedTransport::StartListener() {
  const auto& listen = rep_->config.listen;
  if (!listen.has_value()) {
    return std::optional<HostPort>();
  }
  MutexLock lock(rep_->mu);
  if (rep_->server != nullptr) {
    return Status::FailedPrecondition("the listener was already started");
  }
  auto server = std::make_unique<SeedServer>(rep_->handler, rep_->options);
  Result<HostPort> bound = server->Start(*listen);
  if (!bound.ok()) {
    return bound.status();
  }
  rep_->server = std::move(server);
  return std::optional<HostPort>(*bound);
}

Result<HostPort> SeedTransport::StartPlainListener(const HostPort& listen) {
  MutexLock lock(rep_->mu);
  if (rep_->plain_server != nullptr) {
    return Status::FailedPrecondition("the plain listener was already started");
  }
  rep_->plain_options = rep_->options;
  rep_->plain_options.tls = nullptr;
  auto server = std::make_unique<SeedServer>(rep_->handler, rep_->plain_options);
  Result<HostPort> bound = server->Start(listen);
  if (!bound.ok()) return bound.status();
  rep_->plain_server = std::move(server);
  return *bound;
}

std::optional<Json> SeedTransport::Request(const Json& payload) const {
  const auto& source = rep_->config.source;
  if (!source.has_value()) {
    return std::nullopt;
  }
  std::string label = "payload";
  if (payload.is_object() && payload.contains("kind") && payload["kind"].is_string()) {
    label = payload["kind"].get<std::string>();
  }
  Json request = payload.is_object() ? payload : Json::object();
  request["token"] = rep_->tokens->Sent();
  ExchangeOptions options;
  options.connect_timeout = rep_->options.connect_timeout;
  options.response_timeout = rep_->options.response_timeout;
  options.max_response_bytes = kMaxResponseBytes;
  options.tls = rep_->options.tls;
  options.cancel = rep_->options.cancel;
  Result<Json> response = ExchangeJson(*source, request, options);
  if (!response.ok()) {
    Logger().warn("Cannot fetch {} from {} over D2D; falling back locally: {}", label,
                  source->ToString(), response.status().message());
    return std::nullopt;
  }
  if (!response->is_object()) {
    Logger().warn("Source {} sent a malformed response for {}; falling back locally",
                  source->ToString(), label);
    return std::nullopt;
  }
  return std::move(*response);
}

std::string ExplainSourceError(const Json& response) {
  auto it = response.find("message");
  if (it == response.end() || !it->is_string()) return "no message";
  std::string text;
  for (char c : it->get_ref<const std::string&>().substr(0, 300)) {
    text += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text == "Unauthorized request") {
    text += " (check that both daemons read the same token)";
  } else if (text == "unsupported seed kind") {
    text += " (the source does not serve this kind: check its flags, e.g. --model)";
  }
  return text;
}

AdoptOutcome SeedTransport::Adopt(Seedable& seedable, const Json& ctx, std::string* why) const {
  const auto& source = rep_->config.source;
  LogFields fields{{"seed_kind", std::string(seedable.kind())},
                   {"source", source.has_value() ? source->ToString() : std::string()}};
  Result<Json> params = seedable.RequestParams(ctx);
  if (!params.ok() || !params->is_object()) {
    Logger().warn(
        "Rejected the remote {} seed; using the local path: {}", seedable.kind(),
        params.ok() ? "request parameters are not a JSON object" : params.status().message());
    return AdoptOutcome::kRejected;
  }
  Json request = Json::object();
  request["kind"] = std::string(seedable.kind());
  request.update(*params);
  std::optional<Json> response = Request(request);
  if (!response.has_value()) {
    return AdoptOutcome::kNoResponse;
  }
  auto status_it = response->find("status");
  std::string status = "None";
  if (status_it != response->end()) {
    status = status_it->is_string() ? status_it->get<std::string>() : status_it->dump();
  }
  if (status != "ok") {
    bool miss = status == "miss";
    auto level = miss ? spdlog::level::info : spdlog::level::warn;
    Logger().log(level, "No remote {} seed adopted (status {}); using the local path",
                 seedable.kind(), status);
    if (!miss) {
      const std::string explained = ExplainSourceError(*response);
      Logger().warn("The source answered: {}", explained);
      if (why != nullptr) *why = explained;
    }
    return miss ? AdoptOutcome::kMiss : AdoptOutcome::kNotOk;
  }
  static const Json kNull;
  auto payload_it = response->find("payload");
  const Json& payload = payload_it == response->end() ? kNull : *payload_it;
  Status installed;
  bool validated = false;
  try {
    Result<Json> valid = seedable.ValidatePayload(payload);
    validated = valid.ok();
    installed = valid.ok() ? seedable.Install(ctx, *valid) : valid.status();
  } catch (const std::exception& e) {
    installed = Status::Internal(e.what());
  }
  // A valid payload that this host could not write (a disk error, no space, no
  // permission) is not the peer's fault: said so, not "rejected".
  const bool local = validated && (installed.code() == StatusCode::kIoError ||
                                   installed.code() == StatusCode::kResourceExhausted ||
                                   installed.code() == StatusCode::kPermissionDenied);
  if (installed.code() == StatusCode::kCancelled) {
    Logger().info("Stopped installing the remote {} seed: {}", seedable.kind(),
                  installed.message());
    if (why != nullptr) *why = installed.message();
    return AdoptOutcome::kRejected;
  }
  if (!installed.ok() && local) {
    Logger().warn(
        "Could not install the remote {} seed on this host (a local error, not the "
        "peer's); using the local path: {}",
        seedable.kind(), installed.message());
    if (why != nullptr) *why = installed.message();
    return AdoptOutcome::kRejected;
  }
  if (!installed.ok()) {
    Logger().warn("Rejected the remote {} seed; using the local path: {}", seedable.kind(),
                  installed.message());
    if (why != nullptr) *why = installed.message();
    return AdoptOutcome::kRejected;
  }
  Logger().info("Adopted remote {} seed", seedable.kind());
  return AdoptOutcome::kAdopted;
}

Json SeedTransport::HandleRequest(const Json& request) const {
  return rep_->handler.Handle(request);
}

void SeedTransport::Close() {
  std::unique_ptr<SeedServer> server;
  std::unique_ptr<SeedServer> plain;
  {
    MutexLock lock(rep_->mu);
    server = std::move(rep_->server);
    plain = std::move(rep_->plain_server);
  }
  if (server != nullptr) server->Close();
  if (plain != nullptr) plain->Close();
}

size_t SeedTransport::open_connections() const {
  MutexLock lock(rep_->mu);
  return rep_->server == nullptr ? 0 : rep_->server->open_connections();
}

}  // namespace seedd
