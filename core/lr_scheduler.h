#pragma once
// Learning-rate schedulers with a state_dict, so a resumed run continues the
// schedule (torch::optim::LRScheduler keeps its step count private): PyTorch's
// torch.optim.lr_scheduler, each as its closed form of the step count (equal
// to PyTorch's, tested against it: tests/python/scheduler_oracle.py).
//
//   Lightning / PyTorch            lightning-cpp
//   StepLR                         lt::StepLR(opt, step_size, gamma)
//   MultiStepLR                    lt::MultiStepLR(opt, milestones, gamma)
//   ExponentialLR                  lt::ExponentialLR(opt, gamma)
//   LambdaLR                       lt::LambdaLR(opt, factor)
//   LinearLR (warm-up)             lt::LinearLR(opt, start_factor, end_factor, total_iters)
//   CosineAnnealingLR              lt::CosineAnnealingLR(opt, T_max, eta_min)
//   CosineAnnealingWarmRestarts    lt::CosineAnnealingWarmRestarts(opt, T_0, T_mult, eta_min)
//   OneCycleLR                     lt::OneCycleLR(opt, lt::OneCycleLROptions(max_lr, total_steps)...)
//   SequentialLR (warm-up, then)   lt::SequentialLR(opt, {schedulers}, milestones)
//   ReduceLROnPlateau              lt::ReduceLROnPlateau(opt, lt::ReduceLROnPlateauOptions()...), stepped
//                                  with the metric OptimizerConfig::monitor names
// In YAML (lightning-cpp's command): the top-level lr_scheduler, {class_path:
// CosineAnnealingLR, init_args: {T_max: 10, interval: epoch, warmup_iters: 2}}
// (LRSchedulerSpec below; TrainerOptions::lr_scheduler in C++).
//
// As PyTorch's, each sets the optimizer's rates of step 0 when it is made
// (LinearLR's start_factor, OneCycleLR's max_lr / div_factor); a scheduler's
// base rates are the optimizer's when it is made (SequentialLR's children
// take the first child's).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

// When the loop steps a scheduler: after each optimizer step, or at each training epoch's end.
enum class Interval { kStep, kEpoch };

class LRScheduler {
 public:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  // Advances one step (an epoch or an optimizer step, per the interval the
  // module chose) and writes the new rates into the optimizer.
  void step();
  // A scheduler that follows a metric (ReduceLROnPlateau) steps with its
  // value; the loop gives it the metric OptimizerConfig::monitor names.
  virtual bool monitors_metric() const { return false; }
  virtual void step(double metric);
  int64_t last_epoch() const { return last_epoch_; }
  std::vector<double> get_last_lr() const;

  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);

 protected:
  // Learning rate of each param group after `last_epoch()` steps.
  virtual std::vector<double> compute_lrs() const = 0;
  // Writes compute_lrs() (and what else a step sets: OneCycleLR's momentum)
  // into the optimizer.
  virtual void apply();
  // PyTorch's initial step: the rates of step 0, written when the scheduler is
  // made. A scheduler's constructor calls it last.
  void initial_step() { apply(); }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Each base rate times `factor` (a schedule that scales them alike).
  std::vector<double> scaled_base_lrs(double factor) const;
  torch::optim::Optimizer& optimizer() const { return optimizer_; }
  int64_t last_epoch_ = 0;  // steps taken

 private:
  friend class SequentialLR;
  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
};

class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// The rate times gamma at each milestone passed (a milestone given twice counts twice).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(torch::optim::Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  double gamma_;
};

class LambdaLR : public LRScheduler {
 public:
  LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  std::function<double(int64_t)> factor_;
};

// From base * start_factor to base * end_factor over total_iters steps, then
// constant: a warm-up.
class LinearLR : public LRScheduler {
 public:
  LinearLR(torch::optim::Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// Half a cosine from base to eta_min over T_max steps (and back up over the next T_max, as PyTorch's).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// SGDR: a cosine from base to eta_min over T_0 steps, restarted at base, each period T_mult times the last.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(torch::optim::Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1,
                              double eta_min = 0.0);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  int64_t t_0_, t_mult_;
  double eta_min_;
};

struct OneCycleLROptions {
  // One max_lr for every param group, or one per group.
  OneCycleLROptions(std::vector<double> max_lr, int64_t total_steps)
      : max_lr_(std::move(max_lr)), total_steps_(total_steps) {}
  OneCycleLROptions(double max_lr, int64_t total_steps) : OneCycleLROptions(std::vector<double>{max_lr}, total_steps) {}
  TORCH_ARG(std::vector<double>, max_lr);
  // The steps of the whole cycle (PyTorch's total_steps, or epochs * steps_per_epoch).
  TORCH_ARG(int64_t, total_steps);
  // The share of the cycle spent raising the rate.
  TORCH_ARG(double, pct_start) = 0.3;
  // "cos" or "linear".
  TORCH_ARG(std::string, anneal_strategy) = "cos";
  // Cycle SGD's momentum (Adam's and AdamW's beta1) inversely to the rate, between these.
  TORCH_ARG(bool, cycle_momentum) = true;
  TORCH_ARG(double, base_momentum) = 0.85;
  TORCH_ARG(double, max_momentum) = 0.95;
  // The first rate is max_lr / div_factor, the last that / final_div_factor.
  TORCH_ARG(double, div_factor) = 25.0;
  TORCH_ARG(double, final_div_factor) = 1e4;
  // Up, back down to the first rate, then to the last (fast.ai's three phases).
  TORCH_ARG(bool, three_phase) = false;
};

// The 1cycle policy: up to max_lr, then down far below the first rate, in total_steps steps (interval: step).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(torch::optim::Optimizer& optimizer, OneCycleLROptions options);

 protected:
  std::vector<double> compute_lrs() const override;
  void apply() override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // 0 initial, 1 max, 2 min (momentum: 0 max, 1 base)
  };
  // The rate (or momentum, `momentum`) of param group `group` at the current step.
  double at(size_t group, bool momentum) const;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::vector<double> initial_lrs_, max_lrs_, min_lrs_;
};

// Runs each scheduler in turn: the i-th from milestones[i-1] on, counting its
// steps from there (a warm-up, then a decay).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  std::vector<double> compute_lrs() const override;
  void apply() override;

 private:
  // The scheduler that runs at the current step, at its own step count.
  LRScheduler& current() const;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  // "min": the metric should fall (a loss); "max": rise (an accuracy).
  TORCH_ARG(std::string, mode) = "min";
  // The new rate is the old one times factor.
  TORCH_ARG(double, factor) = 0.1;
  // Steps without improvement before the rate falls.
  TORCH_ARG(int64_t, patience) = 10;
  // What counts as an improvement: by this share of the best ("rel") or this much ("abs").
  TORCH_ARG(double, threshold) = 1e-4;
  TORCH_ARG(std::string, threshold_mode) = "rel";
  // Steps to wait after a reduction before counting again.
  TORCH_ARG(int64_t, cooldown) = 0;
  // The lowest rate, one for every group or one per group.
  TORCH_ARG(std::vector<double>, min_lr) = std::vector<double>{0.0};
  // A change smaller than this is not made.
  TORCH_ARG(double, eps) = 1e-8;
};

// Lowers the rate when a metric stops improving; stepped with the metric
// OptimizerConfig::monitor names (YAML's lr_scheduler: val_loss by default).
class ReduceLROnPlateau : public LRScheduler {
 public:
  explicit ReduceLROnPlateau(torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  bool monitors_metric() const override { return true; }
  using LRScheduler::step;
  void step(double metric) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  std::vector<double> compute_lrs() const override;  // the optimizer's rates: this scheduler changes them in place

 private:
  bool is_better(double value) const;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

double get_lr(const torch::optim::OptimizerParamGroup& group);
void set_lr(torch::optim::OptimizerParamGroup& group, double lr);

// A scheduler named in a config (YAML's top-level lr_scheduler, LightningCLI's):
// made on the optimizer configure_optimizers returns, with how the loop
// steps it. The built-ins register under their class names with PyTorch's
// arguments, and interval, frequency and (but ReduceLROnPlateau) a linear
// warm-up of warmup_iters steps from warmup_start_factor (a SequentialLR).
struct LRSchedulerSpec {
  std::function<std::shared_ptr<LRScheduler>(torch::optim::Optimizer&)> make;
  Interval interval = Interval::kEpoch;
  int64_t frequency = 1;
  std::string monitor;  // ReduceLROnPlateau's
  bool strict = true;
};

class Registry;
void register_builtin_lr_schedulers(Registry& registry);

}  // namespace lt
