#include "kinds/autotune/table.h"

#include "common/crypto.h"
#include "seedd/json_text.h"

namespace seedd {
namespace {

// Python's repr-like text of a JSON value in messages: strings unquoted as
// FlashInfer's f-strings print them, None for null and missing.
std::string Show(const Json& v) {
  if (v.is_null()) return "None";
  if (v.is_string()) return v.get<std::string>();
  return DumpJson(v);
}

}  // namespace

std::string TableGeneration(const Json& object_without_generation) {
  // nlohmann's objects are key-sorted maps; ensure_ascii escapes like Python.
  return Sha256Hex(object_without_generation.dump(-1, ' ', /*ensure_ascii=*/true,
                                                  Json::error_handler_t::replace));
}

Result<AutotuneTable> AutotuneTable::FromJson(const Json& table) {
  if (!table.is_object()) return Status::InvalidArgument("autotune table must be a JSON object");
  AutotuneTable out;
  Json rest = Json::object();
  for (auto it = table.begin(); it != table.end(); ++it) {
    const std::string& key = it.key();
    if (key == "_metadata") {
      out.metadata = it.value();
    } else if (key == "_records") {
      out.records = it.value();
    } else if (key == "_generation") {
      continue;
    } else {
      out.entries[key] = it.value();
    }
  }
  auto gen = table.find("_generation");
  if (gen != table.end()) {
    Json without = table;
    without.erase("_generation");
    if (!gen->is_string() || gen->get<std::string>() != TableGeneration(without)) {
      return Status::DataLoss("autotune table _generation does not match its content");
    }
  }
  return out;
}

Result<AutotuneTable> AutotuneTable::Parse(std::string_view text) {
  Result<Json> parsed = ParseJson(text);
  if (!parsed.ok()) return parsed.status().WithContext("autotune table");
  return FromJson(*parsed);
}

Json AutotuneTable::ToJson() const {
  Json out = Json::object();
  if (metadata.has_value()) out["_metadata"] = *metadata;
  if (records.has_value()) out["_records"] = *records;
  for (const auto& [k, v] : entries) out[k] = v;
  out["_generation"] = TableGeneration([&] {
    Json without = out;
    without.erase("_generation");
    return without;
  }());
  return out;
}

std::string AutotuneTable::Serialize() const {
  // FlashInfer's order, which a sorted map would lose: an ordered object.
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (metadata.has_value()) out["_metadata"] = nlohmann::ordered_json::parse(metadata->dump());
  if (records.has_value()) out["_records"] = nlohmann::ordered_json::parse(records->dump());
  for (const auto& [k, v] : entries) out[k] = nlohmann::ordered_json::parse(v.dump());
  out["_generation"] = ToJson()["_generation"];
  return out.dump(2, ' ', /*ensure_ascii=*/true, nlohmann::ordered_json::error_handler_t::replace) +
         "\n";
}

std::string MetadataMismatches::Describe() const {
  std::map<std::string, std::pair<Json, Json>> all = hard;
  all.insert(soft.begin(), soft.end());
  std::string out;
  for (const auto& [k, v] : all) {
    out +=
        (out.empty() ? "" : ", ") + k + ": remote=" + Show(v.first) + " vs local=" + Show(v.second);
  }
  return out;
}

MetadataMismatches ClassifyMetadata(const Json& saved, const Json& local) {
  static const Json kEmpty = Json::object();
  const Json& s = saved.is_object() ? saved : kEmpty;
  MetadataMismatches out;
  if (!local.is_object()) return out;
  for (auto it = local.begin(); it != local.end(); ++it) {
    auto found = s.find(it.key());
    const Json saved_value = found == s.end() ? Json() : *found;
    if (saved_value == it.value() || saved_value == "*") continue;
    if (saved_value.is_null() || saved_value == "unknown" || saved_value == "None") {
      out.soft[it.key()] = {saved_value, it.value()};
    } else {
      out.hard[it.key()] = {saved_value, it.value()};
    }
  }
  return out;
}

}  // namespace seedd
