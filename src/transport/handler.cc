#include "transport/handler.h"

#include <cassert>
#include <exception>

#include "common/crypto.h"
#include "common/logging.h"
#include "wire/json_text.h"

namespace seedd {

Json ErrorResponse(std::string_view message) {
  return Json{{"status", "error"}, {"message", std::string(message)}};
}

RequestHandler::RequestHandler(std::vector<SeedablePtr> seedables, std::string token)
    : token_(std::move(token)) {
  for (auto& s : seedables) {
    std::string kind(s->kind());
    bool inserted = seedables_.emplace(kind, std::move(s)).second;
    assert(inserted && "two seedables share a kind");
    (void)inserted;
  }
}

bool RequestHandler::Authenticate(const Json& request) const {
  if (token_.empty() || !request.is_object()) {
    return false;
  }
  auto it = request.find("token");
  if (it == request.end() || !it->is_string()) {
    return false;
  }
  return ConstantTimeEquals(it->get_ref<const std::string&>(), token_);
}

const Seedable* RequestHandler::Find(std::string_view kind) const {
  auto it = seedables_.find(kind);
  return it == seedables_.end() ? nullptr : it->second.get();
}

Json RequestHandler::Handle(const Json& request) const {
  const Seedable* seedable = nullptr;
  if (request.is_object()) {
    auto kind = request.find("kind");
    if (kind != request.end() && kind->is_string()) {
      seedable = Find(kind->get_ref<const std::string&>());
    }
  }
  if (seedable == nullptr) {
    return ErrorResponse("unsupported seed kind");
  }
  try {
    Result<std::optional<Json>> payload = seedable->Resolve(request);
    if (!payload.ok()) {
      return ErrorResponse(payload.status().message());
    }
    if (!payload->has_value()) {
      return Json{{"status", "miss"}};
    }
    return Json{{"status", "ok"}, {"payload", std::move(**payload)}};
  } catch (const std::exception& e) {
    // A seedable must not throw; if one does, the peer gets an error, not a crash.
    Logger().error("Resolving {} threw: {}", seedable->kind(), e.what());
    return ErrorResponse("internal error resolving " + std::string(seedable->kind()));
  }
}

Json RequestHandler::HandleFrameBody(std::string_view body) const {
  Result<Json> request = ParseJson(body);
  if (!request.ok()) {
    return ErrorResponse("Invalid request: " + request.status().message());
  }
  if (!Authenticate(*request)) {
    return ErrorResponse("Unauthorized request");
  }
  return Handle(*request);
}

}  // namespace seedd
