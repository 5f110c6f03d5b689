// loops/ (fit, training epoch and evaluation loops) on one process: step and
// batch limits, validation cadence, sanity validation, epoch metrics and their
// names, per-epoch LR schedulers and loops swapped in for the built-in ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

// -- limits and cadence -------------------------------------------------------

TEST_F(TrainerTest, MaxStepsStopsMidEpoch) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(10).max_steps(5));
  trainer.fit(model, loader(regression_data(16), 4));  // 4 batches per epoch
  EXPECT_EQ(trainer.global_step(), 5);
  EXPECT_EQ(model->training_steps, 5);
}

TEST_F(TrainerTest, MaxStepsCountsOptimizerStepsNotBatches) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().max_steps(3).accumulate_grad_batches(2));
  trainer.fit(model, loader(regression_data(40), 4));
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_EQ(model->training_steps, 6);
}

TEST_F(TrainerTest, LimitTrainBatchesCountAndFraction) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer by_count(lt::TrainerOptions().max_epochs(2).limit_train_batches(3));
  by_count.fit(model, loader(regression_data(40), 4));  // 10 batches per epoch
  EXPECT_EQ(model->training_steps, 6);

  auto model2 = std::make_shared<Regressor>();
  lt::Trainer by_fraction(lt::TrainerOptions().max_epochs(2).limit_train_batches(0.5));
  by_fraction.fit(model2, loader(regression_data(40), 4));
  EXPECT_EQ(model2->training_steps, 10);
}

TEST_F(TrainerTest, ValCheckIntervalFractionRunsValidationTwicePerEpoch) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).val_check_interval(0.5).num_sanity_val_steps(0));
  trainer.fit(model, loader(regression_data(16), 4), loader(regression_data(8, 9), 4));  // 4 train, 2 val batches
  EXPECT_EQ(model->validation_steps, 2 * 2 * 2);
  EXPECT_TRUE(trainer.callback_metrics().count("val_loss"));
}

TEST_F(TrainerTest, ValCheckIntervalCountAndCheckValEveryNEpoch) {
  auto model = std::make_shared<Regressor>();
  // 7 batches, validation every 3 batches: after batches 3 and 6; every 2nd epoch only.
  lt::Trainer trainer(
      lt::TrainerOptions().max_epochs(4).val_check_interval(3).check_val_every_n_epoch(2).num_sanity_val_steps(0));
  trainer.fit(model, loader(regression_data(28), 4), loader(regression_data(4, 9), 4));
  EXPECT_EQ(model->validation_steps, 2 /*epochs*/ * 2 /*runs*/ * 1 /*batch*/);
}

// A checkpoint written after an epoch's last step is mid-epoch (the epoch's
// end and its validation are still to come): resumed from it, the epoch runs
// no batch and validates once, as the run it was taken from did.
TEST_F(TrainerTest, ResumedAfterTheEpochsLastStepTheEpochEndValidationRuns) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lt_last_step_" + std::to_string(::getpid()) + ".ckpt")).string();
  auto save = std::make_shared<lt::LambdaCallback>();
  save->on_after_optimizer_step_fn = [&path](lt::Trainer& trainer, lt::LightningModule&) {
    if (trainer.global_step() == 4) trainer.save_checkpoint(path);
  };
  const std::string dir = std::filesystem::path(path).replace_extension().string();
  auto options = [&dir] {
    return lt::TrainerOptions().max_epochs(1).num_sanity_val_steps(0).enable_progress_bar(false).default_logger(false)
        .enable_model_summary(false).default_root_dir(dir);
  };
  auto model = std::make_shared<Regressor>();
  lt::Trainer first(options().callbacks({save}));
  first.fit(model, loader(regression_data(16), 4), loader(regression_data(4, 9), 4));  // 4 train batches, 1 val
  ASSERT_EQ(model->validation_steps, 1);
  auto resumed = std::make_shared<Regressor>();
  lt::Trainer second(options());
  second.fit(resumed, loader(regression_data(16), 4), loader(regression_data(4, 9), 4), path);
  EXPECT_EQ(resumed->training_steps, 0);
  EXPECT_EQ(resumed->validation_steps, 1);
  std::filesystem::remove(path);
  std::filesystem::remove_all(dir);
}

TEST_F(TrainerTest, SanityValidationMetricsAreDiscarded) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).limit_val_batches(0).num_sanity_val_steps(2));
  trainer.fit(model, loader(regression_data(8), 4), loader(regression_data(8, 9), 4));
  EXPECT_EQ(model->validation_steps, 0);  // limit_val_batches=0 disables both
  EXPECT_FALSE(trainer.callback_metrics().count("val_loss"));
}

TEST_F(TrainerTest, EpochMetricsAreBatchSizeWeightedMeans) {
  class Constant : public Regressor {
   public:
    void validation_step(const Batch& batch, int64_t batch_idx) override {
      log("value", batch_idx == 0 ? 1.0 : 4.0);  // batch 0 has 4 rows, batch 1 has 2
    }
  };
  auto model = std::make_shared<Constant>();
  lt::Trainer trainer;
  auto metrics = trainer.validate(model, loader(regression_data(6), 4));
  EXPECT_DOUBLE_EQ(metrics.at("value"), (1.0 * 4 + 4.0 * 2) / 6);
}

// validate() and test() return lt::Metrics: a name that was not logged is an error naming the ones that were,
// not a 0 inserted by std::map's operator[].
TEST_F(TrainerTest, MetricsLookupOfAnUnloggedNameNamesTheLoggedOnes) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().enable_progress_bar(false).default_logger(false));
  const lt::Metrics metrics = trainer.validate(model, loader(regression_data(8), 4));
  EXPECT_EQ(metrics["val_loss"], metrics.at("val_loss"));
  try {
    (void)metrics["val_los"];
    FAIL() << "no error for an unlogged name";
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "no metric 'val_los' was logged; the metrics are: val_loss");
  }
  EXPECT_EQ(metrics.size(), 1u);
}

TEST_F(TrainerTest, StepAndEpochLoggingNames) {
  class Both : public Regressor {
   public:
    torch::Tensor training_step(const Batch& batch, int64_t idx) override {
      auto loss = torch::mse_loss(forward(batch.data), batch.target);
      log("l", loss, lt::LogOptions().on_step(true).on_epoch(true));
      return loss;
    }
  };
  auto model = std::make_shared<Both>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).log_every_n_steps(1));
  trainer.fit(model, loader(regression_data(8), 4));
  EXPECT_TRUE(trainer.state().logged_metrics.count("l_step"));
  EXPECT_TRUE(trainer.state().logged_metrics.count("l_epoch"));
  EXPECT_TRUE(trainer.callback_metrics().count("l"));
}

TEST_F(TrainerTest, StepLRSchedulerPerEpoch) {
  class Scheduled : public Regressor {
   public:
    lt::OptimizerConfig configure_optimizers() override {
      auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1.0));
      return {opt, std::make_shared<lt::StepLR>(*opt, 1, 0.5), lt::Interval::kEpoch};
    }
  };
  auto model = std::make_shared<Scheduled>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3));
  trainer.fit(model, loader(regression_data(8), 4));
  EXPECT_DOUBLE_EQ(lt::get_lr(trainer.optimizer_config()->optimizer->param_groups()[0]), 0.125);
}
// -- replaceable loops ----------------------------------------------------------

class CountingEpochLoop : public lt::TrainingEpochLoop {
 public:
  void run(lt::LoopContext& ctx, lt::DataLoader& train, lt::DataLoader* val) override {
    ++epochs;
    lt::TrainingEpochLoop::run(ctx, train, val);
  }
  int epochs = 0;
};

class SkipOddBatches : public lt::AutomaticOptimization {
 public:
  torch::Tensor run(lt::LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool window_end) override {
    if (batch_idx % 2 == 1) return {};
    return lt::AutomaticOptimization::run(ctx, batch, batch_idx, window_end);
  }
};

TEST_F(TrainerTest, SwappedInLoopsAreUsed) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3));
  auto epoch_loop = std::make_shared<CountingEpochLoop>();
  epoch_loop->set_automatic_optimization(std::make_shared<SkipOddBatches>());
  trainer.fit_loop().set_epoch_loop(epoch_loop);
  trainer.fit(model, loader(regression_data(16), 4));
  EXPECT_EQ(epoch_loop->epochs, 3);
  EXPECT_EQ(model->training_steps, 3 * 2);
  EXPECT_EQ(trainer.global_step(), 3 * 2);
}

}  // namespace
