#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace seedd {

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto l = std::make_shared<spdlog::logger>("seedd", std::move(sink));
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ seedd[%P]: %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
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
