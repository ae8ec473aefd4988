#include <algorithm>

#include "seedd/artifact_store.h"

namespace seedd {

Status ArtifactKey::ValidatePart(std::string_view what, std::string_view part) {
  auto bad = [&](std::string_view why) {
    std::string shown(part.substr(0, 64));
    std::replace_if(
        shown.begin(), shown.end(), [](char c) { return static_cast<unsigned char>(c) < ' '; },
        '?');
    return Status::InvalidArgument("invalid " + std::string(what) + " '" + shown +
                                   (part.size() > 64 ? "...'" : "'") + ": " + std::string(why));
  };
  if (part.empty()) return bad("empty");
  if (part.size() > 255) return bad("longer than 255 bytes");
  if (part == "." || part == "..") return bad("'.' and '..' are not names");
  if (part.find('/') != std::string_view::npos || part.find('\\') != std::string_view::npos) {
    return bad("contains a path separator");
  }
  if (part.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (part.rfind(".seedd~", 0) == 0) return bad("the prefix '.seedd~' is reserved");
  return Status::Ok();
}

Result<ArtifactKey> ArtifactKey::Make(std::string_view kind, std::string_view config_hash,
                                      std::string_view filename) {
  SEEDD_RETURN_IF_ERROR(ValidatePart("kind", kind));
  SEEDD_RETURN_IF_ERROR(ValidatePart("config_hash", config_hash));
  SEEDD_RETURN_IF_ERROR(ValidatePart("filename", filename));
  return ArtifactKey(std::string(kind), std::string(config_hash), std::string(filename));
}

Result<ArtifactKey> ArtifactKey::Parse(std::string_view text) {
  size_t a = text.find('/');
  size_t b = a == std::string_view::npos ? a : text.find('/', a + 1);
  if (b == std::string_view::npos) {
    return Status::InvalidArgument(
        "invalid artifact key: expected <kind>/<config_hash>/<filename>");
  }
  return Make(text.substr(0, a), text.substr(a + 1, b - a - 1), text.substr(b + 1));
}

}  // namespace seedd
