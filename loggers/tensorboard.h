#pragma once
// lt::TensorBoardLogger: TensorBoard event files and hparams.yaml under
// <save_dir>/<name>/version_<N>, as Lightning's TensorBoardLogger lays them
// out: scalars (one Event per value, Summary.Value.simple_value, a float32),
// hyperparameters for TensorBoard's HParams tab (the three summaries
// torch.utils.tensorboard.summary.hparams writes), texts and histograms
// (add_text, add_histogram: SummaryWriter's). N is the next free version
// unless given. Nothing is created before the first write, so building a
// logger (a config being checked) leaves no trace.
//
// The file, events.out.tfevents.<unix seconds>.<host>.<pid>.<counter>, is a
// TFRecord stream: per record a uint64 length, the masked CRC32C of those 8
// bytes, the serialized Event and its masked CRC32C (all little-endian). The
// first Event holds file_version "brain.Event:2". The Event, Summary and
// HParams messages are encoded here by hand: no protobuf dependency.
//
// A resumed run (continue_previous) writes a new events file in the newest
// version folder; TensorBoard reads every events file of a folder as one run.
// Restored from a checkpoint of that version, it first writes a
// SessionLog START at the step after the checkpoint's last logged step (the
// purge_step of PyTorch's SummaryWriter): TensorBoard drops what the
// interrupted run logged at that step and after (the legacy loader at the
// START, the data server per tag as the resumed run logs it again).

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <torch/arg.h>
#include <torch/torch.h>

#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/loggers/utilities.h>

namespace lt {

// The options, each with its /// doc above its row: loggers/tensorboard_options.def,
// after those of version_folder_options.def.
struct TensorBoardLoggerOptions {
  TensorBoardLoggerOptions() = default;
  TensorBoardLoggerOptions(std::string save_dir) : save_dir_(std::move(save_dir)) {}  // NOLINT
#define LT_OPTION LT_OPTION_ARG
#define LT_OPTION_WITH LT_OPTION_WITH_ARG
#include <lightning_cpp/loggers/tensorboard_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
};

class TensorBoardLogger : public Logger {
 public:
  static constexpr const char* kHparamsFile = "hparams.yaml";
  static constexpr const char* kFileVersion = "brain.Event:2";

  explicit TensorBoardLogger(TensorBoardLoggerOptions options = {});
  ~TensorBoardLogger() override;

  std::string name() const override { return options_.name(); }
  // One Event per metric, its value rounded to float32 (simple_value).
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  // Typed as the values are: numbers (float64), bools, strings. Every call
  // writes all hparams so far.
  void log_hyperparams(const HParams& params) override;
  // SummaryWriter.add_text: `text` (Markdown) under "<tag>/text_summary" in
  // TensorBoard's Text tab. Written at once.
  void add_text(const std::string& tag, const std::string& text, int64_t step);
  // SummaryWriter.add_histogram: the values' distribution in `bins` equal-width
  // buckets between their min and max (Histograms and Distributions tabs), with
  // their count, sum and sum of squares. Written at once; finite values only.
  void add_histogram(const std::string& tag, const torch::Tensor& values, int64_t step, int64_t bins = 64);
  void save() override;
  void finalize(const std::string& status) override;
  // <save_dir>/<name>/version_<N>; the version is fixed at the first call.
  std::string log_dir() const override;
  int64_t version() const;
  void continue_previous() override;
  void continue_version_of(const std::string& checkpoint) override;
  // {"version", "step": the highest step logged so far, -1 if none}
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // This logger's events file; empty before the first record.
  const std::string& events_file() const { return events_file_; }

 private:
  // Frames one serialized Event as a TFRecord and buffers it; opens the
  // file (chooses its name, buffers the file_version Event) at the first.
  void add_record(const std::string& event);
  // An Event of one Summary.Value (serialized) at `step`, flushed.
  void add_summary(const std::string& value, int64_t step);
  void flush();

  TensorBoardLoggerOptions options_;
  VersionFolder folder_;
  HParams hparams_;
  std::string events_file_;
  std::string pending_;  // framed records not yet appended
  int64_t log_calls_since_flush_ = 0;
  double last_flush_time_ = 0;  // unix seconds
  int64_t last_step_ = -1;      // the highest step given to log_metrics
};

}  // namespace lt
