// The catalog kind (seedctl ls): what a daemon lists, and what a target accepts
// from a daemon that lies or sends too much.
#include "seedd/catalog.h"

#include <gtest/gtest.h>

namespace seedd {
namespace {

Catalog OneOfEach() {
  Catalog c;
  c.models.push_back({"llama", "ab12", 1024, 2, true});
  c.artifacts.push_back("triton/00112233445566778899aabbccddeeff/k.bin");
  return c;
}

TEST(Catalog, SurvivesARoundTrip) {
  Result<Catalog> back = ParseCatalog(CatalogToJson(OneOfEach()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->models.size(), 1u);
  EXPECT_EQ(back->models[0].name, "llama");
  EXPECT_EQ(back->models[0].total_size, 1024u);
  EXPECT_EQ(back->artifacts, OneOfEach().artifacts);
  EXPECT_FALSE(back->truncated);
}

TEST(Catalog, WhatALyingDaemonSendsIsRefused) {
  auto refused = [](Json j) { return !ParseCatalog(j).ok(); };
  EXPECT_TRUE(refused(Json::array()));
  EXPECT_TRUE(refused(Json{{"models", 1}, {"artifacts", Json::array()}}));
  EXPECT_TRUE(refused(Json{{"models", Json::array()}}));
  Json j = CatalogToJson(OneOfEach());
  j["models"][0].erase("total_size");
  EXPECT_TRUE(refused(j));
  j = CatalogToJson(OneOfEach());
  j["models"][0]["total_size"] = -1;
  EXPECT_TRUE(refused(j));
  j = CatalogToJson(OneOfEach());
  j["models"][0]["name"] = "bad\x1b[2Jname";  // a terminal escape
  EXPECT_TRUE(refused(j));
  j = CatalogToJson(OneOfEach());
  j["models"][0]["root_digest"] = "";
  EXPECT_TRUE(refused(j));
  j = CatalogToJson(OneOfEach());
  j["artifacts"][0] = std::string(1025, 'a');
  EXPECT_TRUE(refused(j));
  j = CatalogToJson(OneOfEach());
  j["artifacts"][0] = 7;
  EXPECT_TRUE(refused(j));
}

TEST(Catalog, MoreThanTheBoundIsRefused) {
  Catalog c;
  c.artifacts.assign(kMaxCatalogKeys + 1, "k/0011223344556677/f");
  EXPECT_FALSE(ParseCatalog(CatalogToJson(c)).ok());
  c.artifacts.resize(kMaxCatalogKeys);
  EXPECT_TRUE(ParseCatalog(CatalogToJson(c)).ok());
}

TEST(Catalog, TheSourceChecksThePrefixBeforeListing) {
  std::string asked = "(not asked)";
  SeedablePtr kind = NewCatalogSeedable([&](const std::string& prefix) -> Result<Catalog> {
    asked = prefix;
    return OneOfEach();
  });
  EXPECT_FALSE(kind->Resolve(Json{{"kind", "catalog"}, {"prefix", 7}}).ok());
  EXPECT_FALSE(kind->Resolve(Json{{"kind", "catalog"}, {"prefix", std::string(513, 'p')}}).ok());
  EXPECT_EQ(asked, "(not asked)");
  Result<std::optional<Json>> listed = kind->Resolve(Json{{"kind", "catalog"}, {"prefix", "tr"}});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(asked, "tr");
  EXPECT_TRUE(ParseCatalog(**listed).ok());
  EXPECT_FALSE(kind->Install(Json::object(), **listed).ok());
}

}  // namespace
}  // namespace seedd
