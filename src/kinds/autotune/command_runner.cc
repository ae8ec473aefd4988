#include <fcntl.h>
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
#include "common/errno_status.h"
#include "common/unique_fd.h"
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
    Result<std::optional<std::string>> saved = disk.Get(key);
    if (!saved.ok()) return saved.status();
    // In a directory of its own (mode 0700, made by mkdtemp), created with
    // O_EXCL | O_NOFOLLOW: nobody else can put a file or a link where the table
    // is written and read back.
    std::string dir = "/tmp/seedd-autotune-XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) {
      return ErrnoStatus("a directory for the autotune command's table (mkdtemp /tmp)", errno);
    }
    const std::string path = dir + "/table.json";
    struct Cleanup {
      const std::string& dir;
      const std::string& path;
      ~Cleanup() {
        ::unlink(path.c_str());
        ::rmdir(dir.c_str());
      }
    } cleanup{dir, path};
    if (saved->has_value()) {
      UniqueFd out(
          ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out.valid()) return ErrnoStatus("create " + path, errno);
      for (std::string_view rest = **saved; !rest.empty();) {
        const ssize_t n = ::write(out.get(), rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ErrnoStatus("write " + path, errno);
        rest.remove_prefix(static_cast<size_t>(n));
      }
    }
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
      return Status::Cancelled("the autotune command was stopped");
    }
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
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
