#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : scheduling_(std::move(scheduling)) {
  LT_CHECK_VALUE(!scheduling_.empty(), "GradientAccumulationScheduler: scheduling is empty; give {epoch: factor}");
  for (const auto& [epoch, factor] : scheduling_) {
    LT_CHECK_VALUE(epoch >= 0, "GradientAccumulationScheduler: scheduling epochs must be >= 0, got ", epoch);
    LT_CHECK_VALUE(factor >= 1, "GradientAccumulationScheduler: the factor for epoch ", epoch, " must be >= 1, got ",
                   factor);
  }
  scheduling_.emplace(0, 1);  // kept if epoch 0 has a factor
}

int64_t GradientAccumulationScheduler::get_accumulate_grad_batches(int64_t epoch) const {
  auto it = scheduling_.upper_bound(epoch);  // the first key after `epoch`; the one before applies
  return std::prev(it)->second;
}

void GradientAccumulationScheduler::on_train_start(Trainer& trainer, LightningModule& module) {
  LT_CHECK_VALUE(module.automatic_optimization(),
                 "GradientAccumulationScheduler needs automatic optimization (manual optimization accumulates in "
                 "training_step); remove the callback or switch to automatic optimization");
  const int64_t k = trainer.options().accumulate_grad_batches();
  LT_CHECK_VALUE(k == 1 || k == last_set_,  // a second fit finds what this callback set
                 "trainer.accumulate_grad_batches is ", trainer.options().accumulate_grad_batches(),
                 " and a GradientAccumulationScheduler is set; keep one of them");
}

void GradientAccumulationScheduler::on_train_epoch_start(Trainer& trainer, LightningModule& /*module*/) {
  last_set_ = get_accumulate_grad_batches(trainer.current_epoch());
  trainer.set_accumulate_grad_batches(last_set_);
}

}  // namespace lt
