#pragma once
// lt::EarlyStopping: stops fit when a monitored metric stops improving
// (Lightning's EarlyStopping). It checks at the end of the training epoch
// (after that epoch's validation) or, with check_on_train_epoch_end(false),
// at the end of each validation run. The decision is reduced across ranks
// with strategy.reduce_boolean_decision(any): one rank stopping stops all.

#include <cmath>
#include <optional>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: callbacks/early_stopping_options.def.
struct EarlyStoppingOptions {
  EarlyStoppingOptions() = default;
  EarlyStoppingOptions(std::string monitor) : monitor_(std::move(monitor)) {}  // NOLINT
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/early_stopping_options.def>
#undef LT_OPTION
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});

  std::string name() const override { return "EarlyStopping"; }
  std::string state_key() const override;
  int priority() const override { return kMonitorPriority; }
  // Compatible with Join: it runs at epoch end, after every rank has joined,
  // or after a mid-epoch validation, which every rank runs (joined ones too);
  // its decision is a reduce_boolean_decision all ranks take part in.
  JoinSupport join_support(const TrainerOptions& options) const override;

  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const EarlyStoppingOptions& options() const { return options_; }
  int64_t wait_count() const { return wait_count_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }
  double best_score() const { return best_score_; }
  // Why the last check stopped (or would have); empty if it did not.
  const std::string& stopping_reason() const { return reason_; }

 private:
  void run_check(Trainer& trainer);
  // Returns whether to stop and sets reason_.
  bool evaluate(double current);
  bool better(double a, double b) const { return options_.mode() == "min" ? a < b : a > b; }

  EarlyStoppingOptions options_;
  bool check_on_train_epoch_end_ = true;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = 0;
  double best_score_;
  std::string reason_;
};

}  // namespace lt
