#include <lightning_cpp/loggers/registration.h>

#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/loggers/console.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/tensorboard.h>

namespace lt {

void register_builtin_loggers(Registry& r) {
  const CSVLoggerOptions csv;
  const ConsoleLoggerOptions console;
  const TensorBoardLoggerOptions tensorboard;
  r.add<Logger>("CSVLogger", "metrics.csv and hparams.yaml under <save_dir>/<name>/version_N",
                ArgSchema()
                    .add_string("save_dir", std::nullopt, "root folder (null: trainer.default_root_dir)")
                    .add_string("name", csv.name(), "experiment folder")
                    .add_int("version", std::nullopt, "version number (null: the next free one)")
                    .add_int("flush_logs_every_n_steps", csv.flush_logs_every_n_steps(),
                             "rows buffered between writes"),
                [](const InitArgs& a) {
                  std::string save_dir = a.get_optional_string("save_dir").value_or(
                      a.trainer() ? a.trainer()->default_root_dir() : std::string("."));
                  return std::make_shared<CSVLogger>(
                      CSVLoggerOptions(save_dir)
                          .name(a.get_string("name"))
                          .version(a.get_optional_int("version"))
                          .flush_logs_every_n_steps(a.get_int("flush_logs_every_n_steps")));
                });
  r.add<Logger>("ConsoleLogger", "metrics as log lines (spdlog)",
                ArgSchema()
                    .add_string("level", console.level(), "spdlog level",
                                {"trace", "debug", "info", "warn", "error", "critical", "off"})
                    .add_string("pattern", console.pattern(), "spdlog pattern")
                    .add_string("stream", console.stream(), "where to write", {"stdout", "stderr"})
                    .add_int("precision", console.precision(), "significant digits"),
                [](const InitArgs& a) {
                  return std::make_shared<ConsoleLogger>(ConsoleLoggerOptions()
                                                             .level(a.get_string("level"))
                                                             .pattern(a.get_string("pattern"))
                                                             .stream(a.get_string("stream"))
                                                             .precision(static_cast<int>(a.get_int("precision"))));
                });
  r.add<Logger>("TensorBoardLogger", "TensorBoard event files (scalars, hparams) under <save_dir>/<name>/version_N",
                ArgSchema()
                    .add_string("save_dir", std::nullopt, "root folder (null: trainer.default_root_dir)")
                    .add_string("name", tensorboard.name(), "experiment folder")
                    .add_int("version", std::nullopt, "version number (null: the next free one)")
                    .add_int("flush_logs_every_n_steps", tensorboard.flush_logs_every_n_steps(),
                             "log calls buffered between writes")
                    .add_float("flush_secs", tensorboard.flush_secs(), "longest time between writes, seconds")
                    .add_bool("default_hp_metric", tensorboard.default_hp_metric(),
                              "log hp_metric=-1 with the hparams (a column in the HParams tab)"),
                [](const InitArgs& a) {
                  std::string save_dir = a.get_optional_string("save_dir").value_or(
                      a.trainer() ? a.trainer()->default_root_dir() : std::string("."));
                  return std::make_shared<TensorBoardLogger>(
                      TensorBoardLoggerOptions(save_dir)
                          .name(a.get_string("name"))
                          .version(a.get_optional_int("version"))
                          .flush_logs_every_n_steps(a.get_int("flush_logs_every_n_steps"))
                          .flush_secs(a.get_float("flush_secs"))
                          .default_hp_metric(a.get_bool("default_hp_metric")));
                });
}

}  // namespace lt
