#include "seedd/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "common/mutex.h"

namespace seedd {

namespace {

Mutex program_mu;

// This thread's LogFields, outermost first.
thread_local std::vector<std::pair<std::string, Json>> t_fields;
std::string program GUARDED_BY(program_mu) = "seedd";

// One JSON object per line; the message is escaped (invalid UTF-8 replaced).
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string program) : program_(std::move(program)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto since = msg.time.time_since_epoch();
    const std::time_t secs = duration_cast<seconds>(since).count();
    const auto millis = duration_cast<milliseconds>(since).count() % 1000;
    std::tm utc{};
    ::gmtime_r(&secs, &utc);
    char when[40];
    const size_t n = std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(when + n, sizeof(when) - n, ".%03dZ", static_cast<int>(millis));
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    nlohmann::json line = {
        {"time", when},
        {"level", std::string(level.data(), level.size())},
        {"event", std::string(msg.payload.data(), msg.payload.size())},
        {"fields", {{"program", program_}, {"pid", ::getpid()}, {"thread", msg.thread_id}}}};
    // Formatted on the logging thread (spdlog's synchronous sinks): its fields.
    for (const auto& [name, value] : t_fields) line["fields"][name] = value;
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(program_);
  }

 private:
  const std::string program_;
};

std::string TextPattern(const std::string& name) {
  return "%Y-%m-%dT%H:%M:%S.%e %^%L%$ " + name + "[%P]: %v";
}

bool json_format GUARDED_BY(program_mu) = false;

// Extra sinks live behind one dist_sink, whose add/remove lock against logging.
spdlog::sinks::dist_sink_mt& ExtraSinks() {
  static auto* sinks = new spdlog::sinks::dist_sink_mt();
  return *sinks;
}

}  // namespace

LogFields::LogFields(std::initializer_list<std::pair<std::string_view, Json>> fields)
    : added_(fields.size()) {
  for (const auto& [name, value] : fields) t_fields.emplace_back(std::string(name), value);
}

LogFields::~LogFields() { t_fields.resize(t_fields.size() - added_); }

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
  MutexLock lock(program_mu);
  program = std::string(name);
  if (json_format) {
    Logger().set_formatter(std::make_unique<JsonFormatter>(program));
  } else {
    Logger().set_pattern(TextPattern(program));
  }
}

bool SetLogFormat(std::string_view format) {
  if (format != "text" && format != "json") return false;
  MutexLock lock(program_mu);
  json_format = format == "json";
  if (json_format) {
    Logger().set_formatter(std::make_unique<JsonFormatter>(program));
  } else {
    Logger().set_pattern(TextPattern(program));
  }
  return true;
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
