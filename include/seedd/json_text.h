// JSON text <-> Json value at the trust boundary: never throws, bounds nesting.
// Pure functions; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

// Deeper documents are rejected before parsing: the JSON library's destructor,
// copy and dump recurse, so unbounded depth from a peer would overflow the stack.
inline constexpr int kMaxJsonDepth = 128;

// Parses UTF-8 JSON text. Errors: InvalidArgument "not valid JSON: ..." or
// "JSON nesting deeper than 128 levels".
Result<Json> ParseJson(std::string_view text);

// Serialises compactly. Invalid UTF-8 in strings is replaced with U+FFFD, never thrown.
std::string DumpJson(const Json& value);
// DumpJson's text, appended to *out.
void AppendJson(const Json& value, std::string* out);
// DumpJson's text handed to `sink` in consecutive pieces of about 64 KiB (to
// hash or send a large value's text without holding all of it).
void JsonTextInPieces(const Json& value, const std::function<void(std::string_view)>& sink);

// A one-line description of a JSON value's type, for error messages ("string", "array", ...).
std::string_view JsonTypeName(const Json& value);

}  // namespace seedd
