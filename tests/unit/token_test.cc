// The shared token: read, checked and kept to seedd.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "kinds/autotune/runner.h"
#include "seedd/artifact_store.h"
#include "seedd/daemon.h"
#include "seedd/json_text.h"
#include "seedd/tokens.h"
#include "support/test_util.h"
#include "transport/handler.h"

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

// A token file may hold several tokens, one per line: the first is sent, any is
// accepted. Blank lines and trailing whitespace (a CRLF file) are skipped.
TEST(Token, AFileHoldsSeveralTokensOnePerLine) {
  testing::TempDir dir;
  auto tokens = LoadTokens(
      WriteToken(dir, "new-one\r\n\n  \nold-one \n", std::filesystem::perms::owner_read));
  ASSERT_OK(tokens);
  EXPECT_EQ(*tokens, (std::vector<std::string>{"new-one", "old-one"}));
  auto first = LoadToken(WriteToken(dir, "new-one\nold-one\n", std::filesystem::perms::owner_read));
  ASSERT_OK(first);
  EXPECT_EQ(*first, "new-one");
}

TEST(Token, ABadByteNamesItsLine) {
  testing::TempDir dir;
  auto tokens = LoadTokens(WriteToken(dir, "good\nb\x01d\n", std::filesystem::perms::owner_read));
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(tokens.status().message().find("(line 2)"), std::string::npos)
      << tokens.status().message();
  auto blank = LoadTokens(WriteToken(dir, "\n \n", std::filesystem::perms::owner_read));
  ASSERT_FALSE(blank.ok());
  EXPECT_NE(blank.status().message().find("is empty"), std::string::npos);
}

// The ring a daemon shares with its transport and pulls: any token accepted,
// the first sent, all replaced at once; none accepts nothing.
TEST(TokenRing, AcceptsAnySendsTheFirstAndIsReplacedWhole) {
  TokenRing ring({"new", "old"});
  EXPECT_EQ(ring.Sent(), "new");
  EXPECT_TRUE(ring.Accepts("old"));
  EXPECT_TRUE(ring.Accepts("new"));
  EXPECT_FALSE(ring.Accepts("other"));
  ring.Replace({"new"});
  EXPECT_FALSE(ring.Accepts("old"));
  ring.Replace({});
  EXPECT_EQ(ring.Sent(), "");
  EXPECT_FALSE(ring.Accepts(""));
}

TEST(TokenRing, AHandlerAuthenticatesWithTheTokensOfNow) {
  auto ring = std::make_shared<TokenRing>(std::vector<std::string>{"old"});
  RequestHandler handler({}, ring);
  EXPECT_TRUE(handler.Authenticate(Json{{"kind", "x"}, {"token", "old"}}));
  EXPECT_FALSE(handler.Authenticate(Json{{"kind", "x"}, {"token", "new"}}));
  ring->Replace({"old", "new"});
  EXPECT_TRUE(handler.Authenticate(Json{{"kind", "x"}, {"token", "new"}}));
  ring->Replace({"new"});
  EXPECT_FALSE(handler.Authenticate(Json{{"kind", "x"}, {"token", "old"}}));
}

}  // namespace
}  // namespace seedd
