// Running a short helper program and reading what it prints.
// Thread safety: the function is (it touches no shared state but the child).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "seedd/status.h"

namespace seedd {

struct CapturedRun {
  int exit_code = -1;  // -1: ended by a signal
  std::string out;     // its standard output, up to the cap
};

// Runs argv[0] (looked up on PATH) with argv and the daemon's environment,
// standard input from /dev/null and standard error discarded, and returns what
// it wrote to its standard output. DeadlineExceeded (the child killed) when it
// runs past `timeout`; ResourceExhausted when it writes more than `max_output`
// bytes; FailedPrecondition naming the program when it cannot be started.
Result<CapturedRun> RunCapture(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout, size_t max_output = 1 << 20);

}  // namespace seedd
