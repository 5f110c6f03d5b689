#pragma once
// lt::CSVLogger: metrics.csv and hparams.yaml under
// <save_dir>/<name>/version_<N>, as Lightning's CSVLogger lays them out. N is
// the next free version unless given. Nothing is created before the first
// write, so building a logger (a config being checked) leaves no trace.
// A resumed run (continue_previous) takes the newest version instead and
// appends to its metrics.csv; restored from a checkpoint of that version, the
// file is cut back to the rows it had then, so that no step is there twice.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/loggers/utilities.h>

namespace lt {

// The options, each with its /// doc above its row: loggers/csv_options.def,
// after those of version_folder_options.def.
struct CSVLoggerOptions {
  CSVLoggerOptions() = default;
  CSVLoggerOptions(std::string save_dir) : save_dir_(std::move(save_dir)) {}  // NOLINT
#define LT_OPTION LT_OPTION_ARG
#define LT_OPTION_WITH LT_OPTION_WITH_ARG
#include <lightning_cpp/loggers/csv_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
};

class CSVLogger : public Logger {
 public:
  static constexpr const char* kMetricsFile = "metrics.csv";
  static constexpr const char* kHparamsFile = "hparams.yaml";

  explicit CSVLogger(CSVLoggerOptions options = {});
  ~CSVLogger() override;

  std::string name() const override { return options_.name(); }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const HParams& params) override;
  void save() override;
  void finalize(const std::string& status) override;
  // <save_dir>/<name>/version_<N>; the version is fixed at the first call.
  std::string log_dir() const override;
  int64_t version() const;
  void continue_previous() override;
  void continue_version_of(const std::string& checkpoint) override;
  // {"version", "rows": metric rows logged so far}
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  struct Row {
    int64_t step;
    std::map<std::string, double> values;
  };
  void write_metrics();
  // The rows of this version's metrics.csv, if it has one.
  void read_metrics();

  CSVLoggerOptions options_;
  VersionFolder folder_;
  HParams hparams_;
  std::vector<std::string> keys_;  // sorted, "step" included
  std::vector<Row> rows_;          // every row so far (rewritten when a new key appears)
  size_t rows_written_ = 0;
  bool header_written_ = false;
};

}  // namespace lt
