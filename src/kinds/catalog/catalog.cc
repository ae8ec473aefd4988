#include "seedd/catalog.h"

namespace seedd {

namespace {

constexpr size_t kMaxNameBytes = 1024;
constexpr size_t kMaxModels = 10000;

bool Printable(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

class CatalogSeedable : public Seedable {
 public:
  explicit CatalogSeedable(std::function<Result<Catalog>(const std::string&)> list)
      : list_(std::move(list)) {}

  std::string_view kind() const override { return kCatalogKind; }

  Result<Json> RequestParams(const Json& ctx) const override {
    Json params = Json::object();
    if (ctx.is_object() && ctx.contains("prefix")) params["prefix"] = ctx["prefix"];
    return params;
  }

  Result<std::optional<Json>> Resolve(const Json& request) const override {
    std::string prefix;
    if (auto it = request.find("prefix"); it != request.end()) {
      if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxCatalogPrefix) {
        return Status::InvalidArgument("invalid prefix (expected a string of at most 512 bytes)");
      }
      prefix = it->get<std::string>();
    }
    Result<Catalog> catalog = list_(prefix);
    if (!catalog.ok()) return catalog.status();
    return std::optional<Json>(CatalogToJson(*catalog));
  }

  Result<Json> ValidatePayload(const Json& payload) const override {
    Result<Catalog> catalog = ParseCatalog(payload);
    if (!catalog.ok()) return catalog.status();
    return payload;
  }

  Status Install(const Json&, const Json&) override {
    return Status::FailedPrecondition("a catalog is listed, not installed");
  }

 private:
  std::function<Result<Catalog>(const std::string&)> list_;
};

}  // namespace

Json CatalogToJson(const Catalog& catalog) {
  Json models = Json::array();
  for (const CatalogModel& m : catalog.models) {
    models.push_back({{"name", m.name},
                      {"root_digest", m.root_digest},
                      {"total_size", m.total_size},
                      {"files", m.files},
                      {"complete", m.complete}});
  }
  return Json{{"models", std::move(models)},
              {"artifacts", catalog.artifacts},
              {"truncated", catalog.truncated}};
}

Result<Catalog> ParseCatalog(const Json& payload) {
  auto bad = [](const std::string& why) { return Status::InvalidArgument("catalog: " + why); };
  if (!payload.is_object()) return bad("not an object");
  Catalog catalog;
  const auto models = payload.find("models");
  const auto artifacts = payload.find("artifacts");
  if (models == payload.end() || !models->is_array() || models->size() > kMaxModels) {
    return bad("'models' is not an array of at most 10000");
  }
  if (artifacts == payload.end() || !artifacts->is_array() || artifacts->size() > kMaxCatalogKeys) {
    return bad("'artifacts' is not an array of at most 10000");
  }
  for (const Json& m : *models) {
    if (!m.is_object()) return bad("a model is not an object");
    CatalogModel model;
    const auto name = m.find("name");
    const auto root = m.find("root_digest");
    const auto size = m.find("total_size");
    const auto files = m.find("files");
    if (name == m.end() || !name->is_string() || root == m.end() || !root->is_string() ||
        size == m.end() || !size->is_number_unsigned() || files == m.end() ||
        !files->is_number_unsigned()) {
      return bad("a model lacks name, root_digest, total_size or files");
    }
    model.name = name->get<std::string>();
    model.root_digest = root->get<std::string>();
    if (!Printable(model.name) || !Printable(model.root_digest)) {
      return bad("a model's name or root digest is empty, too long or not printable");
    }
    model.total_size = size->get<uint64_t>();
    model.files = files->get<uint64_t>();
    if (auto c = m.find("complete"); c != m.end() && c->is_boolean())
      model.complete = c->get<bool>();
    catalog.models.push_back(std::move(model));
  }
  for (const Json& k : *artifacts) {
    if (!k.is_string() || !Printable(k.get<std::string>())) return bad("a key is not printable");
    catalog.artifacts.push_back(k.get<std::string>());
  }
  if (auto t = payload.find("truncated"); t != payload.end() && t->is_boolean()) {
    catalog.truncated = t->get<bool>();
  }
  return catalog;
}

SeedablePtr NewCatalogSeedable(std::function<Result<Catalog>(const std::string&)> list) {
  return std::make_shared<CatalogSeedable>(std::move(list));
}

}  // namespace seedd
