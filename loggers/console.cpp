#include <lightning_cpp/loggers/console.h>

#include <cstdio>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <lightning_cpp/core/check.h>

namespace lt {

ConsoleLogger::ConsoleLogger(ConsoleLoggerOptions options) : options_(std::move(options)) {
  const auto level = spdlog::level::from_str(options_.level());
  LT_CHECK_VALUE(level != spdlog::level::off || options_.level() == "off",
                 "ConsoleLogger: level must be one of trace, debug, info, warn, error, critical, off; got '",
                 options_.level(), "'");
  {
    const ConsoleLoggerOptions& options = options_;
    const char* owner = "ConsoleLogger: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/loggers/console_options.def>
#undef LT_OPTION
  }
  spdlog::sink_ptr sink;
  if (options_.stream() == "stdout") {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  // Not registered with spdlog's global registry: two ConsoleLoggers must not clash by name.
  logger_ = std::make_shared<spdlog::logger>("lightning-cpp", sink);
  logger_->set_pattern(options_.pattern());
  logger_->set_level(level);
}

ConsoleLogger::~ConsoleLogger() = default;

void ConsoleLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  std::string line;
  for (const auto& [k, v] : metrics) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*g", options_.precision(), v);
    line += (line.empty() ? "" : ", ") + k + "=" + buf;
  }
  logger_->info("step {}: {}", step, line);
}

void ConsoleLogger::log_hyperparams(const HParams& params) {
  if (params.empty()) return;
  std::string line;
  for (const auto& [k, v] : params) line += (line.empty() ? "" : ", ") + k + "=" + v.str();
  logger_->info("hparams: {}", line);
}

void ConsoleLogger::finalize(const std::string& status) {
  logger_->info("run {}", status);
  logger_->flush();
}

}  // namespace lt
