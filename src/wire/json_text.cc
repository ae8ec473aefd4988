#include "seedd/json_text.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>

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

namespace {

// Strings of printable ASCII without '"' or '\\' (base64 payloads, hashes, names)
// are copied as they are; anything else takes the JSON library's escaping path.
constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

bool HasZeroByte(uint64_t w) { return ((w - kOnes) & ~w & kHighs) != 0; }

// Eight bytes at a time: any byte >= 0x80, < 0x20, '"' or '\\'?
bool NeedsEscaping(uint64_t w) {
  if ((w & kHighs) != 0) return true;
  // Exact for bytes below 0x80, which the check above guarantees.
  if (((w - kOnes * 0x20) & ~w & kHighs) != 0) return true;
  return HasZeroByte(w ^ (kOnes * '"')) || HasZeroByte(w ^ (kOnes * '\\'));
}

bool IsPlain(const std::string& s) {
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (NeedsEscaping(w)) return false;
  }
  for (; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return false;
  }
  return true;
}

void AppendString(const std::string& s, std::string* out) {
  const bool plain = IsPlain(s);
  if (plain) {
    out->push_back('"');
    out->append(s);
    out->push_back('"');
  } else {
    *out += Json(s).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  }
}

// Hands `out` to `sink` (when there is one) once it holds kPieceBytes: the
// text of a large value goes out in pieces instead of whole.
constexpr size_t kPieceBytes = 64 * 1024;
using Sink = std::function<void(std::string_view)>;
void MaybeFlush(std::string* out, const Sink* sink) {
  if (sink != nullptr && out->size() >= kPieceBytes) {
    (*sink)(*out);
    out->clear();
  }
}

// Same text as the library's compact dump; depth is bounded by ParseJson's limit
// for peer values and by construction for local ones.
void Append(const Json& v, std::string* out, const Sink* sink = nullptr) {
  switch (v.type()) {
    // The containers walked directly, not through the library's iterators
    // (a manifest of 100,000 files is millions of steps).
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, value] : v.get_ref<const Json::object_t&>()) {
        if (!first) out->push_back(',');
        first = false;
        AppendString(key, out);
        out->push_back(':');
        Append(value, out, sink);
        MaybeFlush(out, sink);
      }
      out->push_back('}');
      return;
    }
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const Json& e : v.get_ref<const Json::array_t&>()) {
        if (!first) out->push_back(',');
        first = false;
        Append(e, out, sink);
        MaybeFlush(out, sink);
      }
      out->push_back(']');
      return;
    }
    case Json::value_t::string:
      AppendString(v.get_ref<const std::string&>(), out);
      return;
    // Integers as the library writes them, without its serializer (a manifest
    // has tens of thousands of them).
    case Json::value_t::number_unsigned:
    case Json::value_t::number_integer: {
      char digits[24];
      const char* end =
          (v.is_number_unsigned() ? std::to_chars(digits, digits + sizeof digits, v.get<uint64_t>())
                                  : std::to_chars(digits, digits + sizeof digits, v.get<int64_t>()))
              .ptr;
      out->append(digits, static_cast<size_t>(end - digits));
      return;
    }
    case Json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::null:
      *out += "null";
      return;
    default:
      *out += v.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
      return;
  }
}

}  // namespace

std::string DumpJson(const Json& value) {
  std::string out;
  Append(value, &out);
  return out;
}

void AppendJson(const Json& value, std::string* out) { Append(value, out); }

void JsonTextInPieces(const Json& value, const std::function<void(std::string_view)>& sink) {
  std::string piece;
  piece.reserve(kPieceBytes * 2);
  Append(value, &piece, &sink);
  if (!piece.empty()) sink(piece);
}

std::string_view JsonTypeName(const Json& value) { return value.type_name(); }

}  // namespace seedd
