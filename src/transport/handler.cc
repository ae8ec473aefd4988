#include "transport/handler.h"

#include <cassert>
#include <exception>

#include "common/crypto.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "wire/frame.h"

namespace seedd {

Json ErrorResponse(std::string_view message) {
  return Json{{"status", "error"}, {"message", std::string(message)}};
}

RequestHandler::RequestHandler(std::vector<SeedablePtr> seedables, std::string token)
    : RequestHandler(std::move(seedables), std::make_shared<const TokenRing>(
                                               std::vector<std::string>{std::move(token)})) {}

RequestHandler::RequestHandler(std::vector<SeedablePtr> seedables,
                               std::shared_ptr<const TokenRing> tokens)
    : tokens_(std::move(tokens)) {
  for (auto& s : seedables) {
    std::string kind(s->kind());
    bool inserted = seedables_.emplace(kind, std::move(s)).second;
    assert(inserted && "two seedables share a kind");
    (void)inserted;
  }
}

bool RequestHandler::Authenticate(const Json& request) const {
  if (!request.is_object()) return false;
  auto it = request.find("token");
  if (it == request.end() || !it->is_string()) return false;
  return tokens_->Accepts(it->get_ref<const std::string&>());
}

const Seedable* RequestHandler::Find(std::string_view kind) const {
  auto it = seedables_.find(kind);
  return it == seedables_.end() ? nullptr : it->second.get();
}

const Seedable* RequestHandler::FindFor(const Json& request) const {
  if (!request.is_object()) return nullptr;
  auto kind = request.find("kind");
  if (kind == request.end() || !kind->is_string()) return nullptr;
  return Find(kind->get_ref<const std::string&>());
}

Json RequestHandler::Handle(const Json& request) const {
  const Seedable* seedable = FindFor(request);
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

bool Seedable::ResolveTextNow(const Json& request, Result<std::optional<std::string>>* text) const {
  (void)request;
  (void)text;
  return false;
}

Result<std::optional<std::string>> Seedable::ResolveText(const Json& request) const {
  Result<std::optional<Json>> payload = Resolve(request);
  if (!payload.ok()) return payload.status();
  if (!payload->has_value()) return std::optional<std::string>();
  return std::optional<std::string>(DumpJson(**payload));
}

namespace {

// A seedable's payload text (or miss, or error) as the response frame.
std::string ResponseFrame(const Result<std::optional<std::string>>& payload) {
  if (!payload.ok()) return EncodeJsonFrame(ErrorResponse(payload.status().message()));
  if (!payload->has_value()) return EncodeJsonFrame(Json{{"status", "miss"}});
  // The same object Handle answers, keys in the same (sorted) order, written
  // straight after the frame's header (a manifest's text is megabytes).
  constexpr std::string_view kHead = "{\"payload\":", kTail = ",\"status\":\"ok\"}";
  std::string frame;
  frame.reserve(kFrameHeaderBytes + kHead.size() + (*payload)->size() + kTail.size());
  frame.append(kFrameHeaderBytes, '\0');
  frame += kHead;
  frame += **payload;
  frame += kTail;
  SealFrame(&frame);
  return frame;
}

}  // namespace

std::string RequestHandler::HandleToFrame(const Json& request) const {
  const Seedable* seedable = FindFor(request);
  if (seedable == nullptr) return EncodeJsonFrame(ErrorResponse("unsupported seed kind"));
  try {
    return ResponseFrame(seedable->ResolveText(request));
  } catch (const std::exception& e) {
    Logger().error("Resolving {} threw: {}", seedable->kind(), e.what());
    return EncodeJsonFrame(
        ErrorResponse("internal error resolving " + std::string(seedable->kind())));
  }
}

std::optional<std::string> RequestHandler::HandleToFrameNow(const Json& request) const {
  const Seedable* seedable = FindFor(request);
  if (seedable == nullptr) return EncodeJsonFrame(ErrorResponse("unsupported seed kind"));
  try {
    Result<std::optional<std::string>> payload = std::optional<std::string>();
    if (!seedable->ResolveTextNow(request, &payload)) return std::nullopt;
    return ResponseFrame(payload);
  } catch (const std::exception& e) {
    Logger().error("Resolving {} threw: {}", seedable->kind(), e.what());
    return EncodeJsonFrame(
        ErrorResponse("internal error resolving " + std::string(seedable->kind())));
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
