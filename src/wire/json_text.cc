#include "wire/json_text.h"

namespace seedd {
namespace {

// Maximum bracket depth outside strings; stops counting once past the limit.
bool DepthWithin(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

Result<Json> ParseJson(std::string_view text) {
  if (!DepthWithin(text, kMaxJsonDepth)) {
    return Status::InvalidArgument("JSON nesting deeper than " + std::to_string(kMaxJsonDepth) +
                                   " levels");
  }
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return Status::InvalidArgument("not valid JSON");
  }
  return value;
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string_view JsonTypeName(const Json& value) { return value.type_name(); }

}  // namespace seedd
