// The shared token: read, checked and kept to seedd.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "kinds/autotune/runner.h"
#include "seedd/artifact_store.h"
#include "seedd/daemon.h"
#include "support/test_util.h"
#include "wire/json_text.h"

namespace seedd {
namespace {

std::filesystem::path WriteToken(const testing::TempDir& dir, const std::string& bytes,
                                 std::filesystem::perms perms) {
  const auto p = dir.path() / "token";
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  std::filesystem::permissions(p, perms);
  return p;
}

TEST(Token, ATrailingNewlineIsTrimmed) {
  testing::TempDir dir;
  auto token = LoadToken(WriteToken(dir, "s3cret\n", std::filesystem::perms::owner_read));
  ASSERT_OK(token);
  EXPECT_EQ(*token, "s3cret");
}

TEST(Token, ATokenTheJsonWriterWouldAlterIsRefusedAtStart) {
  testing::TempDir dir;
  for (const std::string& bad : {std::string("caf\xc3\xa9"), std::string("a\x01z"),
                                 std::string("tab\there"), std::string("del\x7f")}) {
    auto token = LoadToken(WriteToken(dir, bad + "\n", std::filesystem::perms::owner_read));
    ASSERT_FALSE(token.ok()) << bad;
    EXPECT_EQ(token.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(token.status().message().find("not printable ASCII"), std::string::npos)
        << token.status().message();
  }
  EXPECT_TRUE(
      LoadToken(WriteToken(dir, "printable ~!@# ascii\n", std::filesystem::perms::owner_read))
          .ok());
}

TEST(Token, ATokenFileOthersCanReadIsWarnedAbout) {
  testing::TempDir dir;
  {
    testing::LogCapture logs;
    ASSERT_TRUE(LoadToken(WriteToken(dir, "t\n",
                                     std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write))
                    .ok());
    EXPECT_FALSE(logs.Contains(spdlog::level::warn, "readable by others")) << logs.Dump();
  }
  testing::LogCapture logs;
  ASSERT_TRUE(
      LoadToken(
          WriteToken(dir, "t\n",
                     std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                         std::filesystem::perms::group_read | std::filesystem::perms::others_read))
          .ok());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "readable by others (mode 0644): chmod 600"))
      << logs.Dump();
}

TEST(Token, TheCommandRunnerDoesNotHandTheTokenOnUnlessAsked) {
  testing::TempDir dir;
  const auto script = dir.path() / "tune.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                           "printf '{\"token\": \"%s\"}' \"${SEEDD_TOKEN:-unset}\" "
                           "> \"$SEEDD_AUTOTUNE_TABLE\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  ::setenv("SEEDD_TOKEN", "s3cret", 1);
  ArtifactStorePtr store = NewMemoryArtifactStore();
  ArtifactStore& disk = *store;
  auto key = *ArtifactKey::Make("flashinfer_autotune", std::string(16, 'a'), "t.json");
  auto seen = [&](bool pass) {
    auto runner = NewCommandRunner(script.string(), pass);
    EXPECT_TRUE(runner.ok());
    EXPECT_TRUE((*runner)->Run(disk, key, {0, 0}).ok());
    auto stored = ParseJson(**disk.Get(key));
    return (*stored)["token"].get<std::string>();
  };
  EXPECT_EQ(seen(false), "unset");
  EXPECT_EQ(seen(true), "s3cret");
  ::unsetenv("SEEDD_TOKEN");
}

}  // namespace
}  // namespace seedd
