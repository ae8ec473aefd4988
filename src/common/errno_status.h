// errno → Status with the operation and path in the message. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

// "<what>: <strerror(err)>", with a code chosen from err (ENOENT → NotFound, ...).
Status ErrnoStatus(std::string_view what, int err);

}  // namespace seedd
