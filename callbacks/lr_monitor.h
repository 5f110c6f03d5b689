#pragma once
// lt::LearningRateMonitor: logs each param group's learning rate (and,
// optionally, momentum) to the logger (Lightning's LearningRateMonitor).
// Keys: "lr-<Optimizer>" for one param group, "lr-<Optimizer>/pg<i>" for several;
// momentum as "lr-<Optimizer>-momentum".

#include <map>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: callbacks/lr_monitor_options.def.
struct LearningRateMonitorOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/lr_monitor_options.def>
#undef LT_OPTION
};

class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(LearningRateMonitorOptions options = {});
  std::string name() const override { return "LearningRateMonitor"; }
  int priority() const override { return kMonitorPriority; }

  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                            int64_t batch_idx) override;
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;

  // The values logged last (also what tests read).
  const std::map<std::string, double>& last_logged() const { return last_; }
  // The learning rates (and momenta) of the run's optimizer now.
  std::map<std::string, double> extract(Trainer& trainer) const;

 private:
  bool logs_per_step(Trainer& trainer) const;
  void log(Trainer& trainer);

  LearningRateMonitorOptions options_;
  std::map<std::string, double> last_;
};

// "Adam", "AdamW", "SGD", ... for LibTorch's optimizers; "Optimizer" otherwise.
std::string optimizer_name(const torch::optim::Optimizer& optimizer);

}  // namespace lt
