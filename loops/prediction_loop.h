#pragma once

#include <vector>

#include <lightning_cpp/loops/loop_context.h>

namespace lt {

class PredictionLoop {
 public:
  virtual ~PredictionLoop() = default;
  // predict_step's output for each batch, in order.
  virtual std::vector<torch::Tensor> run(LoopContext& ctx, DataLoader& loader, int64_t max_batches);
};

}  // namespace lt
