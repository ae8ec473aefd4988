// The FlashInfer autotune table file: one JSON object with "_metadata" first, an
// optional "_records", the entries in sorted key order (key: the text of a tuple
// "(op, runner, profile_shapes, extras)", value: [runner, tactic]) and
// "_generation" last: the SHA-256 hex of the preceding object serialised with
// sorted keys and compact separators (Python's json.dumps(sort_keys=True,
// separators=(",", ":"))).
//
// Thread safety: values; pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

struct AutotuneTable {
  std::optional<Json> metadata;  // an object when present
  std::optional<Json> records;
  std::map<std::string, Json> entries;  // key text → [runner, tactic]

  // Reads the file text. Errors: not JSON, not an object, a _generation that
  // does not match the content.
  static Result<AutotuneTable> Parse(std::string_view text);
  static Result<AutotuneTable> FromJson(const Json& table);
  // The file text, in FlashInfer's order, with a fresh _generation.
  std::string Serialize() const;
  // The table as one JSON object (unordered), as carried in a payload.
  Json ToJson() const;
};

// SHA-256 hex of `object` (without "_generation") serialised like Python's
// json.dumps(sort_keys=True, separators=(",", ":")) with ensure_ascii.
std::string TableGeneration(const Json& object_without_generation);

// FlashInfer's metadata rule, over every key of the local metadata: saved value
// equal, or saved "*" → match; saved missing, null, "unknown" or "None" → soft
// mismatch; anything else → hard mismatch. Keys only in the saved metadata are
// ignored; a saved metadata that is not an object counts as empty.
struct MetadataMismatches {
  std::map<std::string, std::pair<Json, Json>> hard;  // key → (saved, local)
  std::map<std::string, std::pair<Json, Json>> soft;
  bool empty() const { return hard.empty() && soft.empty(); }
  // "k: remote=a vs local=b, ..." in key order, hard and soft together.
  std::string Describe() const;
};
MetadataMismatches ClassifyMetadata(const Json& saved, const Json& local);

}  // namespace seedd
