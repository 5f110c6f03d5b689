#pragma once
// Automatic optimization of one micro-batch: training_step, loss / k,
// backward, and on the last micro-batch of an accumulation window the
// optimizer step (clip, step, zero_grad, per-step scheduler).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/loops/loop_context.h>

namespace lt {

class OptimizationLoop {
 public:
  virtual ~OptimizationLoop() = default;
  // Returns the (unscaled, detached) loss of the step; undefined if the step returned none.
  virtual torch::Tensor run(LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool window_end) = 0;
  // Whether optimizer_step can run without a micro-batch (EpochSteps::steps_without_batch):
  // false by default (a loop whose steps are the user's code).
  virtual bool steps_without_batch() const { return false; }
  // The optimizer step alone, on the gradients in place (a padding
  // micro-batch's at a window's end; a joined rank's in lockstep Join).
  virtual void optimizer_step(LoopContext& /*ctx*/) {}
};

class AutomaticOptimization : public OptimizationLoop {
 public:
  torch::Tensor run(LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool window_end) override;
  bool steps_without_batch() const override { return true; }
  void optimizer_step(LoopContext& ctx) override;

 protected:
  void backward(LoopContext& ctx, const torch::Tensor& scaled_loss);

 private:
  // on_nonfinite: error checks the window's losses with its gradients, in
  // one host sync at the window's end: (batch index, loss) of each micro-batch.
  std::vector<std::pair<int64_t, torch::Tensor>> window_losses_;
};

// Name of the first parameter whose gradient has a NaN or an infinity: the
// module's, then the optimizer's own (a sharding strategy's shard).
std::optional<std::string> first_nonfinite_gradient(const torch::nn::Module& module,
                                                    torch::optim::Optimizer& optimizer);

// Runs the per-step LR scheduler if its frequency says so.
void step_scheduler(OptimizerConfig& config, Interval interval, int64_t counter,
                    const std::map<std::string, double>& metrics);

}  // namespace lt
