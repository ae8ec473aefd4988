// A child process for end-to-end tests: spawned with argv and extra environment,
// stdout and stderr captured through pipes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace seedd::testing {

class Process {
 public:
  // Starts argv[0] with argv; `env` entries ("K=V") are added to this process's environment.
  Process(std::vector<std::string> argv, std::vector<std::string> env = {});
  ~Process();  // kills the child if it still runs

  // Reads stdout until a full line arrives or the timeout passes.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout);
  void Signal(int sig);
  // Waits for exit; returns the exit status (128+signal when killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Everything written to stderr so far (call after Wait).
  std::string Stderr();
  std::string Stdout();
  pid_t pid() const { return pid_; }

 private:
  void Drain(int fd, std::string* into);
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::string out_buf_;
  std::string err_buf_;
  std::optional<int> status_;
};

// Runs argv to completion (at most `timeout`); returns {exit status, stdout, stderr}.
struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
};
RunResult RunCommand(std::vector<std::string> argv, std::vector<std::string> env = {},
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace seedd::testing
