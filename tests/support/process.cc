#include "support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

extern char** environ;

namespace seedd::testing {

Process::Process(std::vector<std::string> argv, std::vector<std::string> env) {
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  for (auto& e : env) envs.push_back(e);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  if (const int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
      rc != 0) {
    // Not started (posix_spawn takes no PATH search: a bare name is not found):
    // said at once, as a shell would, instead of a wait until the timeout.
    pid_ = -1;
    status_ = 127;
    err_buf_ = "cannot start " + argv[0] + ": " + std::strerror(rc) + "\n";
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  out_ = out[0];
  err_ = err[0];
  fcntl(out_, F_SETFL, O_NONBLOCK);
  fcntl(err_, F_SETFL, O_NONBLOCK);
}

Process::~Process() {
  if (pid_ > 0 && !status_.has_value()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_ >= 0) close(out_);
  if (err_ >= 0) close(err_);
}

void Process::Drain(int fd, std::string* into) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    into->append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> Process::ReadLine(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    size_t before = out_buf_.size();
    Drain(out_, &out_buf_);
    if (out_buf_.size() == before && (p.revents & POLLHUP)) return std::nullopt;
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !status_.has_value()) kill(pid_, sig);
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!status_.has_value()) {
    Drain(out_, &out_buf_);
    Drain(err_, &err_buf_);
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Drain(out_, &out_buf_);
  Drain(err_, &err_buf_);
  return status_;
}

std::string Process::Stderr() {
  Drain(err_, &err_buf_);
  return err_buf_;
}

std::string Process::Stdout() {
  Drain(out_, &out_buf_);
  return out_buf_;
}

RunResult RunCommand(std::vector<std::string> argv, std::vector<std::string> env,
                     std::chrono::milliseconds timeout) {
  Process p(std::move(argv), std::move(env));
  RunResult r;
  auto st = p.Wait(timeout);
  r.status = st.value_or(-1);
  r.out = p.Stdout();
  r.err = p.Stderr();
  return r;
}

}  // namespace seedd::testing
