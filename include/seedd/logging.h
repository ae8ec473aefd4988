// The library's logger. All seedd components log through Logger(); extra sinks
// (a test's capture, an embedding program's handler) attach with AddLogSink.
// Thread-safe: logging, levels and adding or removing sinks may race freely.
#pragma once

#include <spdlog/spdlog.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "seedd/json.h"

namespace seedd {

// The shared "seedd" logger, created on first use with a stderr sink.
spdlog::logger& Logger();

// Attaches `sink` to Logger() (after stderr) until RemoveLogSink; safe while
// other threads log (a logger's own sink vector is not).
void AddLogSink(std::shared_ptr<spdlog::sinks::sink> sink);
void RemoveLogSink(const std::shared_ptr<spdlog::sinks::sink>& sink);

// Names the program in each line ("seedd[PID]" unless set, e.g. "seedctl").
void SetLogProgram(std::string_view name);

// Parses "trace|debug|info|warn|warning|error|critical|off"; false when unknown.
bool SetLogLevel(std::string_view level);

// "text" (the default: "TIME L seedd[PID]: message") or "json": one object per
// line, {"time": UTC with ms, "level", "event": the message, "fields":
// {"program", "pid", "thread", and the LogFields in scope}}, for log
// pipelines. False when unknown.
bool SetLogFormat(std::string_view format);

// Structured fields of the lines this thread logs while the object lives
// (e.g. {"model", "m"}, {"root_digest", ...}, {"bytes", 123}): the JSON format
// puts them in "fields" (an inner scope's value wins); the text format leaves
// them out, its message says the same in words. Scopes nest and must end in
// the reverse order they began (as locals do).
class LogFields {
 public:
  LogFields(std::initializer_list<std::pair<std::string_view, Json>> fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

 private:
  size_t added_;
};

}  // namespace seedd
