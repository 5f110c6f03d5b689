#pragma once
// One training epoch. The strategy's TrainingEpochContext wraps the whole
// epoch and each micro-batch (DDP: Join + no_sync). Accumulation windows are
// aligned on the micro-batch index: window w is batches [w*k, (w+1)*k), and
// the epoch's last batch always closes a window (as in Lightning).

#include <memory>

#include <lightning_cpp/loops/evaluation_loop.h>
#include <lightning_cpp/loops/optimization/automatic.h>
#include <lightning_cpp/loops/optimization/manual.h>

namespace lt {

class TrainingEpochLoop {
 public:
  TrainingEpochLoop();
  virtual ~TrainingEpochLoop() = default;
  virtual void run(LoopContext& ctx, DataLoader& train, DataLoader* val);

  void set_automatic_optimization(std::shared_ptr<OptimizationLoop> loop) { automatic_ = std::move(loop); }
  void set_manual_optimization(std::shared_ptr<OptimizationLoop> loop) { manual_ = std::move(loop); }
  void set_val_loop(std::shared_ptr<EvaluationLoop> loop) { val_loop_ = std::move(loop); }
  EvaluationLoop& val_loop() { return *val_loop_; }

  // Batch interval between validation runs for an epoch of n batches.
  static int64_t val_check_batch(const TrainerOptions& options, int64_t n);

 protected:
  void run_validation(LoopContext& ctx, DataLoader& val);
  bool max_steps_reached(const LoopContext& ctx) const;

  std::shared_ptr<OptimizationLoop> automatic_;
  std::shared_ptr<OptimizationLoop> manual_;
  std::shared_ptr<EvaluationLoop> val_loop_;
};

}  // namespace lt
