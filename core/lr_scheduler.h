#pragma once
// Learning-rate schedulers with a state_dict, so a resumed run continues the
// schedule (torch::optim::LRScheduler keeps its step count private).

#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

class LRScheduler {
 public:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  // Advances one step (an epoch or an optimizer step, per the interval the
  // module chose) and writes the new rates into the optimizer.
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  std::vector<double> get_last_lr() const;

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  // Learning rate of each param group after `last_epoch_` steps.
  virtual std::vector<double> compute_lrs() const = 0;
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 private:
  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
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

class LambdaLR : public LRScheduler {
 public:
  LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  std::vector<double> compute_lrs() const override;

 private:
  std::function<double(int64_t)> factor_;
};

double get_lr(const torch::optim::OptimizerParamGroup& group);
void set_lr(torch::optim::OptimizerParamGroup& group, double lr);

}  // namespace lt
