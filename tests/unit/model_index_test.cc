// Finding models where people keep them: the Hugging Face hub cache.
#include "kinds/weights/files/model_index.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "support/test_util.h"

namespace seedd {
namespace {

// Sets environment variables for one test and restores them after.
class Env {
 public:
  ~Env() {
    for (const auto& [name, old] : saved_) {
      if (old.has_value()) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void Set(const std::string& name, const std::optional<std::string>& value) {
    if (saved_.count(name) == 0) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value.has_value()) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(HubCache, IsFoundWhereTheHubLibraryLooks) {
  Env env;
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) {
    env.Set(name, std::nullopt);
  }
  env.Set("HOME", "/home/u");
  EXPECT_EQ(HubCacheDir(), "/home/u/.cache/huggingface/hub");
  env.Set("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(HubCacheDir(), "/xdg/huggingface/hub");
  env.Set("HF_HOME", "/hf");
  EXPECT_EQ(HubCacheDir(), "/hf/hub");
  env.Set("HUGGINGFACE_HUB_CACHE", "/legacy");
  EXPECT_EQ(HubCacheDir(), "/legacy");
  env.Set("HF_HUB_CACHE", "/hub");
  EXPECT_EQ(HubCacheDir(), "/hub");
}

TEST(HubCache, ResolvesARepositoryAtARefOrACommit) {
  testing::TempDir dir;
  Env env;
  env.Set("HF_HUB_CACHE", dir.path().string());
  const auto repo = dir.path() / "models--meta-llama--Llama-3.1-8B";
  std::filesystem::create_directories(repo / "snapshots" / "aaaa1111");
  std::filesystem::create_directories(repo / "snapshots" / "bbbb2222");
  std::filesystem::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "aaaa1111";  // no newline, as the hub writes it
  std::ofstream(repo / "refs" / "v2") << "bbbb2222\n";
  EXPECT_EQ(*ResolveModelDir("hf:meta-llama/Llama-3.1-8B"), repo / "snapshots" / "aaaa1111");
  EXPECT_EQ(*ResolveModelDir("hf:meta-llama/Llama-3.1-8B@v2"), repo / "snapshots" / "bbbb2222");
  EXPECT_EQ(*ResolveModelDir("hf:meta-llama/Llama-3.1-8B@bbbb2222"),
            repo / "snapshots" / "bbbb2222");
  // A repository without an organisation.
  std::filesystem::create_directories(dir.path() / "models--gpt2" / "snapshots" / "c0ffee");
  EXPECT_EQ(*ResolveModelDir("hf:gpt2@c0ffee"),
            dir.path() / "models--gpt2" / "snapshots" / "c0ffee");
  // Anything else is a directory.
  EXPECT_EQ(*ResolveModelDir("/models/llama"), "/models/llama");
}

TEST(HubCache, WhatIsMissingIsAClearError) {
  testing::TempDir dir;
  Env env;
  env.Set("HF_HUB_CACHE", dir.path().string());
  auto missing = ResolveModelDir("hf:org/absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(
      missing.status().message().find("is not in the Hugging Face cache " + dir.path().string()),
      std::string::npos)
      << missing.status().message();
  std::filesystem::create_directories(dir.path() / "models--org--m" / "snapshots" / "abc");
  auto rev = ResolveModelDir("hf:org/m@nope");
  ASSERT_FALSE(rev.ok());
  EXPECT_NE(rev.status().message().find("snapshots: abc"), std::string::npos)
      << rev.status().message();
  for (const char* bad : {"hf:", "hf:../x", "hf:a/b/c", "hf:org/m@../../etc", "hf:org/m@"}) {
    EXPECT_EQ(ResolveModelDir(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace seedd
