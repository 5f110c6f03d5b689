// callbacks/gradient_accumulation_scheduler.h: the accumulation factor by
// epoch and the steps it gives, and the schedules Lightning refuses (the
// oracle: Lightning's GradientAccumulationScheduler).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <map>

#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

// Lightning's GradientAccumulationScheduler: {0: 1, 2: 2, 3: 4} steps every
// batch in epochs 0-1, every 2 in epoch 2, every 4 from epoch 3.
TEST_F(CallbacksTest, GradientAccumulationSchedulerSetsTheFactorByEpoch) {
  auto scheduler = std::make_shared<lt::GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{2, 2}, {3, 4}});
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(0), 1) << "epochs before the first key accumulate 1";
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(2), 2);
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(7), 4);
  std::vector<int64_t> steps;
  auto record = std::make_shared<lt::LambdaCallback>();
  record->on_train_epoch_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { steps.push_back(t.global_step()); };
  lt::Trainer trainer(options(5).callbacks({scheduler, record}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader(16, 2));  // 8 batches
  EXPECT_EQ(steps, (std::vector<int64_t>{8, 16, 20, 22, 24}));
  // As Lightning: not with the Trainer's own accumulate_grad_batches, nor bad schedules.
  lt::Trainer both(options(1).accumulate_grad_batches(2).callbacks(
      {std::make_shared<lt::GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}})}));
  EXPECT_THROW(both.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader()), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler({}), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler(std::map<int64_t, int64_t>{{0, 0}}), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler(std::map<int64_t, int64_t>{{-1, 2}}), lt::ValueError);
}

}  // namespace
