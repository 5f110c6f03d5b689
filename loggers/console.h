#pragma once
// lt::ConsoleLogger: metrics and hyperparameters as log lines through spdlog:
//   [12:03:51] [info] step 100: train_loss_step=0.4123, val_acc=0.8412

#include <memory>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/options_table.h>

namespace spdlog {
class logger;
}

namespace lt {

// The options, each with its /// doc above its row: loggers/console_options.def.
struct ConsoleLoggerOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/loggers/console_options.def>
#undef LT_OPTION
};

class ConsoleLogger : public Logger {
 public:
  explicit ConsoleLogger(ConsoleLoggerOptions options = {});
  ~ConsoleLogger() override;
  std::string name() const override { return "console"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const HParams& params) override;
  void finalize(const std::string& status) override;

  // The underlying spdlog logger (add sinks, e.g. a file).
  const std::shared_ptr<spdlog::logger>& spd() const { return logger_; }

 private:
  ConsoleLoggerOptions options_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace lt
