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

namespace lt {

struct EarlyStoppingOptions {
  EarlyStoppingOptions(std::string monitor = "val_loss") : monitor_(std::move(monitor)) {}  // NOLINT
  TORCH_ARG(std::string, monitor);
  // Improvements smaller than this do not count.
  TORCH_ARG(double, min_delta) = 0.0;
  // Checks without improvement before stopping.
  TORCH_ARG(int64_t, patience) = 3;
  TORCH_ARG(bool, verbose) = false;
  TORCH_ARG(std::string, mode) = "min";  // "min" or "max"
  // Missing monitor: error (true) or skip the check (false).
  TORCH_ARG(bool, strict) = true;
  // Stop when the monitored value becomes NaN or infinite.
  TORCH_ARG(bool, check_finite) = true;
  // Stop at once when the value reaches this (better than it).
  TORCH_ARG(std::optional<double>, stopping_threshold) = std::nullopt;
  // Stop at once when the value is worse than this.
  TORCH_ARG(std::optional<double>, divergence_threshold) = std::nullopt;
  // Unset: check at train epoch end when validation runs once per epoch at its end.
  TORCH_ARG(std::optional<bool>, check_on_train_epoch_end) = std::nullopt;
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
