#pragma once
// lt::GradientAccumulationScheduler: accumulate_grad_batches by epoch
// (Lightning's): {0: 1, 4: 2, 8: 4} accumulates 1 batch in epochs 0-3, 2 in
// 4-7 and 4 from epoch 8. Set at each training epoch's start, before the
// epoch plans its optimizer steps (under DDP and Join every rank plans the
// same windows). Needs automatic optimization and the Trainer's
// accumulate_grad_batches left at 1, as Lightning.

#include <cstdint>
#include <map>
#include <string>

#include <lightning_cpp/core/callback.h>

namespace lt {

class GradientAccumulationScheduler : public Callback {
 public:
  // epoch -> accumulate_grad_batches; epochs >= 0, factors >= 1; without a
  // factor for epoch 0, epochs before the first key accumulate 1.
  explicit GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling);
  std::string name() const override { return "GradientAccumulationScheduler"; }

  int64_t get_accumulate_grad_batches(int64_t epoch) const;
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;

 private:
  std::map<int64_t, int64_t> scheduling_;
  int64_t last_set_ = 0;
};

}  // namespace lt
