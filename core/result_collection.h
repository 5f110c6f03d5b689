#pragma once
// What LightningModule::log records: per key, the last step value and a
// batch-size-weighted running mean for the epoch (Lightning's default
// `reduce_fx="mean"`). Names follow Lightning: a key logged with both
// on_step and on_epoch appears as `<key>_step` and `<key>_epoch`.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <torch/arg.h>

#include <lightning_cpp/core/types.h>

namespace lt {

// log()'s arguments, as Lightning's: log("loss", v, lt::LogOptions().prog_bar(true).sync_dist(true)).
struct LogOptions {
  // Unset means Lightning's default for the stage: training_step logs per
  // step, everything else per epoch.
  TORCH_ARG(std::optional<bool>, on_step) = std::nullopt;
  TORCH_ARG(std::optional<bool>, on_epoch) = std::nullopt;
  TORCH_ARG(bool, prog_bar) = false;
  TORCH_ARG(bool, logger) = true;
  // Reduce the value across ranks (strategy.reduce, mean) before recording.
  TORCH_ARG(bool, sync_dist) = false;
  TORCH_ARG(ReduceOp, reduce_fx) = ReduceOp::kMean;
  // Weight of this value in the epoch mean; unset = the current batch size.
  TORCH_ARG(std::optional<int64_t>, batch_size) = std::nullopt;
};

class ResultCollection {
 public:
  using SyncFn = std::function<torch::Tensor(const torch::Tensor&, ReduceOp)>;
  using GatherFn = std::function<std::vector<std::string>(const std::string&)>;

  // Where latest values go (RunState::callback_metrics / progress_bar_metrics).
  void bind(std::map<std::string, double>* callback_metrics, std::map<std::string, double>* progress_bar_metrics) {
    callback_metrics_ = callback_metrics;
    progress_bar_metrics_ = progress_bar_metrics;
  }
  void set_sync(SyncFn sync) { sync_ = std::move(sync); }
  // Exact epoch reduction (evaluation, where ranks may run different numbers
  // of batches): while set, a sync_dist value is not reduced when logged;
  // take_epoch_metrics() gathers every rank's epoch aggregates (Strategy::
  // all_gather_bytes; every rank must call it) and merges them as one process
  // would: mean = sum(value * batch_size) / sum(batch_size) over every rank's
  // batches, sum, min, max. A rank with no batches gets every key too.
  void set_epoch_gather(GatherFn gather) { gather_ = std::move(gather); }
  // Under epoch gathering: "" when every rank runs as many batches, else the
  // ranks' counts; then a per-step sync_dist value (on_step) is refused, as
  // its reductions could not be matched.
  void set_uneven_batches(std::string counts) { uneven_batches_ = std::move(counts); }
  void set_stage(Stage stage, bool in_step_hook) {
    stage_ = stage;
    in_step_hook_ = in_step_hook;
  }
  void set_current_batch_size(int64_t n) { batch_size_ = n; }

  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options);

  // Deferred reduction (Join, plugins/join/joinable_logging.h): while a sink
  // is set, log(sync_dist=true) records nothing and hands the local value to
  // the sink; record_synced() records the reduced value once it is known.
  struct PendingSync {
    std::string name;
    double value = 0.0;
    LogOptions options;
    int64_t batch_size = 1;
  };
  class DeferredSync {
   public:
    virtual ~DeferredSync() = default;
    virtual void defer(PendingSync pending) = 0;
  };
  void set_deferred_sync(DeferredSync* sink) { deferred_ = sink; }
  void record_synced(const PendingSync& pending, double reduced);

  // Values logged since the last call with on_step (name_step / name); clears them.
  std::map<std::string, double> take_step_metrics(bool for_logger);
  // Epoch aggregates of the given stage, as name_epoch / name; resets them.
  std::map<std::string, double> take_epoch_metrics(bool for_logger);
  void reset_epoch();

 private:
  struct Entry {
    LogOptions options;
    bool on_step = false;
    bool on_epoch = false;
    std::optional<double> step_value;
    double weighted_sum = 0.0;
    double weight = 0.0;
    double sum = 0.0;
    double extreme = 0.0;  // running min/max for reduce_fx min/max
    bool has_epoch_value = false;
  };
  SyncFn sync_;
  GatherFn gather_;
  std::string uneven_batches_;
  Stage stage_ = Stage::kNone;
  bool in_step_hook_ = false;
  int64_t batch_size_ = 1;
  std::map<std::string, Entry> entries_;
  std::map<std::string, double>* callback_metrics_ = nullptr;
  std::map<std::string, double>* progress_bar_metrics_ = nullptr;
  DeferredSync* deferred_ = nullptr;
  void publish(const std::string& name, const std::string& key, double value, bool prog_bar);
  // set_epoch_gather: every rank's sync_dist epoch aggregates, merged into entries_.
  void merge_ranks();
  void record(const std::string& name, double x, const LogOptions& options, int64_t batch_size);
};

}  // namespace lt
