#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errno_status.h"
#include "common/unique_fd.h"

extern char** environ;

namespace seedd {

Result<CapturedRun> RunCapture(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout, size_t max_output) {
  if (argv.empty() || argv[0].empty()) return Status::InvalidArgument("no program to run");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status::FailedPrecondition("cannot run '" + argv[0] + "': " + std::strerror(rc));
  }
  write_end.Reset();
  CapturedRun run;
  Status failed = Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failed = Status::DeadlineExceeded("'" + argv[0] + "' ran past " +
                                        std::to_string(timeout.count()) + " ms; stopped");
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline is checked above
    char buf[16384];
    const ssize_t got = ::read(read_end.get(), buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // end of output
    if (run.out.size() + static_cast<size_t>(got) > max_output) {
      failed = Status::ResourceExhausted("'" + argv[0] + "' printed more than " +
                                         std::to_string(max_output) + " bytes; stopped");
      break;
    }
    run.out.append(buf, static_cast<size_t>(got));
  }
  if (!failed.ok()) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!failed.ok()) return failed;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace seedd
