#pragma once
// One training epoch, iterated through the epoch driver
// (plugins/join/epoch_driver.h: the strategy's context, Join + no_sync under
// DDP). Accumulation windows are aligned on the micro-batch index: window w is
// batches [w*k, (w+1)*k), and the epoch's last batch always closes a window
// (as in Lightning).

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
  friend class TrainingEpoch;  // one epoch's run (training_epoch_loop.cpp)
  void run_validation(LoopContext& ctx, DataLoader& val);

  std::shared_ptr<OptimizationLoop> automatic_;
  std::shared_ptr<OptimizationLoop> manual_;
  std::shared_ptr<EvaluationLoop> val_loop_;
};

}  // namespace lt
