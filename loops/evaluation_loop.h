#pragma once
// Validation and test: run validation_step/test_step over a loader without
// gradients and return the epoch metrics.

#include <map>
#include <string>

#include <lightning_cpp/loops/loop_context.h>

namespace lt {

class EvaluationLoop {
 public:
  virtual ~EvaluationLoop() = default;
  // stage: kValidate, kTest or kSanityCheck (validation whose metrics are discarded).
  virtual std::map<std::string, double> run(LoopContext& ctx, DataLoader& loader, Stage stage, int64_t max_batches);
};

}  // namespace lt
