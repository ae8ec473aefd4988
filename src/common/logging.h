// The library's logger. All seedd components log through Logger(); tests attach a
// capturing sink to it. Thread-safe (spdlog's multi-threaded logger).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace seedd {

// The shared "seedd" logger, created on first use with a stderr sink.
spdlog::logger& Logger();

// Parses "trace|debug|info|warn|warning|error|critical|off"; false when unknown.
bool SetLogLevel(std::string_view level);

}  // namespace seedd
