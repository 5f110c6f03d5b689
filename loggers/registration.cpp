#include <lightning_cpp/loggers/registration.h>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/loggers/console.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/mlflow.h>
#include <lightning_cpp/loggers/tensorboard.h>

namespace lt {

void register_builtin_loggers(Registry& r) {
  // Each logger's init args are its Options struct's rows (loggers/*_options.def), in their order.
  r.add<Logger>(
      "CSVLogger", "metrics.csv and hparams.yaml under <save_dir>/<name>/version_N",
      [] {
        ArgSchema schema;
        const CSVLoggerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_OPTION_WITH LT_OPTION_WITH_SCHEMA
#include <lightning_cpp/loggers/csv_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return schema;
      }(),
      [](const InitArgs& args) {
        CSVLoggerOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_OPTION_WITH LT_OPTION_WITH_READ
#include <lightning_cpp/loggers/csv_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return std::make_shared<CSVLogger>(options);
      });
  r.add<Logger>(
      "ConsoleLogger", "metrics as log lines (spdlog)",
      [] {
        ArgSchema schema;
        const ConsoleLoggerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/loggers/console_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        ConsoleLoggerOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/loggers/console_options.def>
#undef LT_OPTION
        return std::make_shared<ConsoleLogger>(options);
      });
  r.add<Logger>(
      "TensorBoardLogger",
      "TensorBoard event files (scalars, hparams, texts, histograms) under <save_dir>/<name>/version_N",
      [] {
        ArgSchema schema;
        const TensorBoardLoggerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_OPTION_WITH LT_OPTION_WITH_SCHEMA
#include <lightning_cpp/loggers/tensorboard_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return schema;
      }(),
      [](const InitArgs& args) {
        TensorBoardLoggerOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_OPTION_WITH LT_OPTION_WITH_READ
#include <lightning_cpp/loggers/tensorboard_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return std::make_shared<TensorBoardLogger>(options);
      });
  r.add<Logger>(
      "MLflowLogger", "MLflow's file store (mlruns/): params, metrics by step, tags, artifacts",
      [] {
        ArgSchema schema;
        const MLflowLoggerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/loggers/mlflow_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        MLflowLoggerOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/loggers/mlflow_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return std::make_shared<MLflowLogger>(options);
      });
}

}  // namespace lt
