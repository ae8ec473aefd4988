#include "common/logging.h"

#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace seedd {

namespace {

// Extra sinks live behind one dist_sink, whose add/remove lock against logging.
spdlog::sinks::dist_sink_mt& ExtraSinks() {
  static auto* sinks = new spdlog::sinks::dist_sink_mt();
  return *sinks;
}

}  // namespace

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto stderr_sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    // A non-owning handle: the dist_sink outlives every logger call.
    std::shared_ptr<spdlog::sinks::sink> extra(&ExtraSinks(), [](spdlog::sinks::sink*) {});
    auto l = std::make_shared<spdlog::logger>(
        "seedd", spdlog::sinks_init_list{std::move(stderr_sink), std::move(extra)});
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ seedd[%P]: %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
}

void SetLogProgram(std::string_view name) {
  Logger().set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ " + std::string(name) + "[%P]: %v");
}

void AddLogSink(std::shared_ptr<spdlog::sinks::sink> sink) {
  Logger();
  ExtraSinks().add_sink(std::move(sink));
}

void RemoveLogSink(const std::shared_ptr<spdlog::sinks::sink>& sink) {
  ExtraSinks().remove_sink(sink);
}

bool SetLogLevel(std::string_view level) {
  if (level == "warning") {
    level = "warn";
  }
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return false;
  }
  Logger().set_level(parsed);
  return true;
}

}  // namespace seedd
