#pragma once
// The fit: sanity validation, then epochs until max_epochs, max_steps or
// should_stop.

#include <memory>

#include <lightning_cpp/loops/training_epoch_loop.h>

namespace lt {

class FitLoop {
 public:
  FitLoop() : epoch_loop_(std::make_shared<TrainingEpochLoop>()) {}
  virtual ~FitLoop() = default;
  virtual void run(LoopContext& ctx, DataLoader& train, DataLoader* val);

  TrainingEpochLoop& epoch_loop() { return *epoch_loop_; }
  void set_epoch_loop(std::shared_ptr<TrainingEpochLoop> loop) { epoch_loop_ = std::move(loop); }

 protected:
  bool done(const LoopContext& ctx) const;
  void sanity_check(LoopContext& ctx, DataLoader* val);

  std::shared_ptr<TrainingEpochLoop> epoch_loop_;
};

}  // namespace lt
