#pragma once

#include <vector>

#include <lightning_cpp/loops/loop_context.h>

namespace lt {

class PredictionLoop {
 public:
  virtual ~PredictionLoop() = default;
  // predict_step's output for each batch, in order. Under a strategy with
  // several ranks (each predicting its shard): every rank's predictions,
  // gathered on every rank, on the CPU, as one process would return them —
  // every sample once, in dataset order, in batches of the loader's batch
  // size; predict_step must return one row per sample.
  virtual std::vector<torch::Tensor> run(LoopContext& ctx, DataLoader& loader, int64_t max_batches);
};

}  // namespace lt
