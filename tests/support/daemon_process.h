// Shared by the end-to-end tests (SEEDD_BIN, SEEDCTL_BIN defined): a token file
// and a small model on disk, real seedd processes started with them, and
// seedctl pull's command line.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd::testing {

// Whether `text` (a process's output) holds `part`.
inline bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class DaemonProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(token_file()) << kToken << "\n";
    std::filesystem::permissions(
        token_file(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    WriteRandom(model() / "w.bin", 3 << 20, 1);
    WriteRandom(model() / "sub" / "config.json", 300, 2);
  }
  std::filesystem::path token_file() const { return dir_.path() / "token"; }
  // 3 MiB + 300 bytes in two files, one nested.
  std::filesystem::path model() const { return dir_.path() / "model"; }

  // seedd with the token and `cache` (default <dir>/cache) on `listen`, and
  // `extra`; returns once it printed its ready line (its address in *addr), or
  // at once when `wait_ready` is false.
  std::unique_ptr<Process> StartDaemon(std::vector<std::string> extra, std::string* addr,
                                       const std::filesystem::path& cache = {},
                                       const std::string& listen = "127.0.0.1:0",
                                       bool wait_ready = true) {
    std::vector<std::string> argv = {
        SEEDD_BIN,
        "--listen",
        listen,
        "--token-file",
        token_file(),
        "--cache-dir",
        cache.empty() ? (dir_.path() / "cache").string() : cache.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(argv);
    if (wait_ready) *addr = ReadyAddress(*p);
    return p;
  }
  // The address of "seedd: serving on ADDRESS", waiting for it.
  static std::string ReadyAddress(Process& p) {
    auto line = p.ReadLine(std::chrono::seconds(60));
    EXPECT_TRUE(line.has_value()) << p.Stderr();
    const std::string prefix = "seedd: serving on ";
    return line.value_or("").substr(std::min(prefix.size(), line.value_or("").size()));
  }
  std::vector<std::string> PullArgs(const std::string& source, const std::filesystem::path& into,
                                    std::vector<std::string> extra = {},
                                    const std::string& name = "m") const {
    std::vector<std::string> argv = {
        SEEDCTL_BIN, "pull",   "--source",    source,         "--model",
        name,        "--into", into.string(), "--token-file", token_file().string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  TempDir dir_;
};

}  // namespace seedd::testing
