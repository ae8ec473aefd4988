// Blocking socket I/O with deadlines, for the data plane and TLS connections.
//
// Thread safety: pure functions of their socket.
#pragma once

#include <chrono>
#include <cstddef>

#include "seedd/status.h"

namespace seedd {

// Blocking socket I/O for the data plane: all of it or an error. Sends never
// raise SIGPIPE.
bool SendAll(int fd, const char* p, size_t n);
Status RecvAll(int fd, char* p, size_t n);

// The same, all of it before `deadline` (DeadlineExceeded / false after it).
bool SendAllBy(int fd, const char* p, size_t n, std::chrono::steady_clock::time_point deadline);
Status RecvAllBy(int fd, char* p, size_t n, std::chrono::steady_clock::time_point deadline);
// Sets the socket's send timeout to the time left until `deadline`, so a
// blocking send on it returns by then; false when it has passed.
bool ArmSendTimeout(int fd, std::chrono::steady_clock::time_point deadline);

}  // namespace seedd
