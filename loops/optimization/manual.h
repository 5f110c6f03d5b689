#pragma once
// Manual optimization: training_step does its own manual_backward and
// optimizer_step(); the loop only calls it.

#include <lightning_cpp/loops/optimization/automatic.h>

namespace lt {

class ManualOptimization : public OptimizationLoop {
 public:
  torch::Tensor run(LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool window_end) override;
};

}  // namespace lt
