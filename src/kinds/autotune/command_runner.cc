#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/crypto.h"
#include "kinds/autotune/cpu_gemm_runner.h"
#include "kinds/autotune/runner.h"
#include "kinds/autotune/table.h"
#include "seedd/logging.h"

extern char** environ;

namespace seedd {
namespace {

class CommandRunner final : public AutotuneRunner {
 public:
  CommandRunner(std::string command, std::vector<std::string> argv, bool pass_token)
      : command_(std::move(command)), argv_(std::move(argv)), pass_token_(pass_token) {}

  std::string name() const override { return "command:" + command_; }
  Json Configuration() const override { return Json{{"runner", "command"}, {"argv", argv_}}; }
  // The engine checks its own environment when it loads the table; seedd has no
  // local metadata to compare a seeded table with.
  Json EnvironmentMetadata() const override { return Json::object(); }

  Status Run(ArtifactStore& disk, const ArtifactKey& key, const AutotuneRunContext& ctx) override {
    const std::string path = "/tmp/seedd-autotune-" + RandomHex(8) + ".json";
    Result<std::optional<std::string>> saved = disk.Get(key);
    if (!saved.ok()) return saved.status();
    if (saved->has_value()) std::ofstream(path, std::ios::binary) << **saved;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      // The shared secret stays in seedd unless the operator hands it on.
      if (!pass_token_ && std::string_view(*e).rfind("SEEDD_TOKEN=", 0) == 0) continue;
      env.emplace_back(*e);
    }
    env.push_back("SEEDD_AUTOTUNE_TABLE=" + path);
    env.push_back("SEEDD_DP_RANK=" + std::to_string(ctx.dp_rank));
    env.push_back("SEEDD_RANK=" + std::to_string(ctx.rank));
    std::vector<char*> cargv;
    for (auto& a : argv_) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data());
    if (rc != 0) {
      ::unlink(path.c_str());
      return Status::FailedPrecondition("cannot run the autotune command '" + argv_[0] +
                                        "': " + std::strerror(rc));
    }
    int status = 0;
    // Polled, so that a stop request ends the program: SIGTERM, then SIGKILL after 1 s.
    for (auto asked = std::chrono::steady_clock::time_point{};;) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid || (done < 0 && errno != EINTR)) break;
      if (ctx.cancelled()) {
        const auto now = std::chrono::steady_clock::now();
        if (asked == std::chrono::steady_clock::time_point{}) {
          asked = now;
          ::kill(pid, SIGTERM);
        } else if (now - asked > std::chrono::seconds(1)) {
          ::kill(pid, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ctx.cancelled()) {
      ::unlink(path.c_str());
      return Status::Cancelled("the autotune command was stopped");
    }
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    ::unlink(path.c_str());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Status::Internal("the autotune command '" + command_ + "' failed (status " +
                              std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
    }
    Result<AutotuneTable> table = AutotuneTable::Parse(text);
    if (!table.ok()) {
      return table.status().WithContext("the table the autotune command left at " + path);
    }
    return disk.Put(key, text);
  }

 private:
  std::string command_;
  std::vector<std::string> argv_;
  const bool pass_token_;
};

}  // namespace

Result<AutotuneRunnerPtr> NewCommandRunner(std::string_view command, bool pass_token) {
  std::vector<std::string> argv;
  std::string word;
  for (char c : command) {
    if (c == ' ') {
      if (!word.empty()) argv.push_back(std::move(word));
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) argv.push_back(word);
  if (argv.empty()) return Status::InvalidArgument("command: needs a program");
  return AutotuneRunnerPtr(new CommandRunner(std::string(command), std::move(argv), pass_token));
}

Result<AutotuneRunnerPtr> NewAutotuneRunner(std::string_view spec, std::vector<GemmShape> shapes,
                                            bool pass_token) {
  if (spec == "cpu-gemm") return AutotuneRunnerPtr(NewCpuGemmRunner(std::move(shapes)));
  if (spec.rfind("command:", 0) == 0) return NewCommandRunner(spec.substr(8), pass_token);
  return Status::InvalidArgument("unknown autotune runner '" + std::string(spec) +
                                 "' (known: cpu-gemm, command:<program and args>)");
}

}  // namespace seedd
