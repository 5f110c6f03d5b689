// trainer/trainer.h on one process: hook order, which steps the module
// implements, module holders, clear errors for bad options, losses and
// batches, a failed validate, deterministic, fast_dev_run and overfit_batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

// -- hook order -------------------------------------------------------------

std::vector<std::string>* g_events = nullptr;

class RecordingCallback : public lt::Callback {
 public:
  std::string name() const override { return "recorder"; }
  // Records every hook of the list (core/callback.h), by name.
#define LT_RECORD(name, params, args) \
  void name params override { g_events->push_back(#name); }
  LT_CALLBACK_HOOKS(LT_RECORD)
#undef LT_RECORD
};

class RecordingRegressor : public Regressor {
 public:
  void on_fit_start() override { g_events->push_back("module.on_fit_start"); }
  void on_train_batch_start(const lt::Batch&, int64_t) override { g_events->push_back("module.on_train_batch_start"); }
  void on_train_batch_end(const torch::Tensor&, const lt::Batch&, int64_t) override {
    g_events->push_back("module.on_train_batch_end");
  }
  void on_train_epoch_end() override { g_events->push_back("module.on_train_epoch_end"); }
  void on_validation_epoch_end() override { g_events->push_back("module.on_validation_epoch_end"); }
};

TEST_F(TrainerTest, HookOrderForOneFit) {
  std::vector<std::string> events;
  g_events = &events;
  auto model = std::make_shared<RecordingRegressor>();
  lt::Trainer trainer(lt::TrainerOptions()
                          .max_epochs(1)
                          .num_sanity_val_steps(1)
                          .callbacks({std::make_shared<RecordingCallback>()}));
  trainer.fit(model, loader(regression_data(8), 4), loader(regression_data(4, 9), 4));
  g_events = nullptr;

  const std::vector<std::string> validation = {
      "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
      "module.on_validation_epoch_end", "on_validation_epoch_end", "on_validation_end"};
  // Lightning's order: the callbacks' hook, then the module's.
  const std::vector<std::string> batch = {"on_train_batch_start", "module.on_train_batch_start",
                                          "on_before_backward",   "on_after_backward",
                                          "on_before_optimizer_step", "on_before_zero_grad",
                                          "on_train_batch_end",   "module.on_train_batch_end",
                                          "on_after_optimizer_step"};
  std::vector<std::string> expected = {"setup", "on_fit_start", "module.on_fit_start", "on_sanity_check_start"};
  expected.insert(expected.end(), validation.begin(), validation.end());
  expected.insert(expected.end(), {"on_sanity_check_end", "on_train_start", "on_train_epoch_start"});
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), batch.begin(), batch.end());
  expected.insert(expected.end(), validation.begin(), validation.end());
  expected.insert(expected.end(),
                  {"module.on_train_epoch_end", "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown"});
  EXPECT_EQ(events, expected);
}

// TORCH_MODULE(Net) users hand the holder to every stage.
class HeldRegressorImpl : public Regressor {
 public:
  void test_step(const Batch& batch, int64_t) override {
    log("test_loss", torch::mse_loss(forward(batch.data), batch.target));
  }
  torch::Tensor predict_step(const Batch& batch, int64_t) override { return forward(batch.data); }
};
TORCH_MODULE(HeldRegressor);

TEST_F(TrainerTest, ModuleHolderWorksForEveryStage) {
  HeldRegressor model;
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).enable_progress_bar(false).default_logger(false));
  trainer.fit(model, loader(regression_data(8), 4));
  EXPECT_EQ(trainer.validate(model, loader(regression_data(8), 4)).count("val_loss"), 1u);
  EXPECT_EQ(trainer.test(model, loader(regression_data(8), 4)).count("test_loss"), 1u);
  EXPECT_EQ(trainer.predict(model, loader(regression_data(8), 4)).size(), 2u);
}

// Lightning's is_overridden: a module without validation_step skips the
// validation loop it was given data for (with a warning), and validate/test
// without their step are refused; seen through a pointer to a base class the
// Trainer cannot tell and runs the loop.
TEST_F(TrainerTest, TheTrainerSeesWhichStepsTheModuleImplements) {
  class TrainOnly : public lt::LightningModule {
   public:
    TrainOnly() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
    torch::Tensor training_step(const Batch& batch, int64_t) override {
      return torch::mse_loss(fc(batch.data), batch.target);
    }
    lt::OptimizerConfig configure_optimizers() override {
      return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    }
    void on_validation_epoch_start() override { ++validations; }
    torch::nn::Linear fc{nullptr};
    int validations = 0;
  };
  class WithValidation : public TrainOnly {
   public:
    void validation_step(const Batch& batch, int64_t) override {
      log("val_loss", torch::mse_loss(fc(batch.data), batch.target));
    }
  };
  auto trainer = [] {
    return lt::Trainer(lt::TrainerOptions().max_epochs(1).num_sanity_val_steps(0).enable_progress_bar(false)
                           .default_logger(false).enable_model_summary(false));
  };
  std::vector<std::string> warnings;
  auto previous = lt::set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  auto train_only = std::make_shared<TrainOnly>();
  trainer().fit(train_only, loader(regression_data(8), 4), lt::FitOptions().val(loader(regression_data(8), 4)));
  lt::set_warning_handler(previous);
  EXPECT_FALSE(train_only->has_validation_step());
  EXPECT_FALSE(train_only->has_test_step());
  EXPECT_EQ(train_only->validations, 0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no validation_step"), std::string::npos) << warnings[0];
  for (const auto& [stage, run] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"validation_step", [&] { trainer().validate(train_only, loader(regression_data(8), 4)); }},
           {"test_step", [&] { trainer().test(train_only, loader(regression_data(8), 4)); }}}) {
    try {
      run();
      ADD_FAILURE() << "ran without " << stage;
    } catch (const lt::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("has no " + stage), std::string::npos) << e.what();
    }
  }

  auto with_validation = std::make_shared<WithValidation>();
  trainer().fit(with_validation, loader(regression_data(8), 4), lt::FitOptions().val(loader(regression_data(8), 4)));
  EXPECT_TRUE(with_validation->has_validation_step());
  EXPECT_FALSE(with_validation->has_test_step());
  EXPECT_EQ(with_validation->validations, 1);
  EXPECT_EQ(trainer().validate(with_validation, loader(regression_data(8), 4)).count("val_loss"), 1u);

  // Through its base's type the object's own overrides are unknown: the loop runs.
  std::shared_ptr<TrainOnly> as_base = std::make_shared<WithValidation>();
  trainer().fit(as_base, loader(regression_data(8), 4), lt::FitOptions().val(loader(regression_data(8), 4)));
  EXPECT_TRUE(as_base->has_validation_step());
  EXPECT_EQ(as_base->validations, 1);
}

// -- errors -----------------------------------------------------------------------

TEST_F(TrainerTest, BadOptionsNameTheOption) {
  try {
    lt::Trainer trainer(lt::TrainerOptions().accumulate_grad_batches(0));
    FAIL() << "expected an error";
  } catch (const lt::ValueError& e) {
    EXPECT_STREQ(e.what(), "trainer.accumulate_grad_batches must be >= 1, got 0");
  }
  EXPECT_THROW(lt::Trainer(lt::TrainerOptions().val_check_interval(1.5)), lt::ValueError);
  EXPECT_THROW(lt::Trainer(lt::TrainerOptions().accelerator("tpu")), lt::ValueError);
}

TEST_F(TrainerTest, TrainingStepWithoutLossIsAClearError) {
  class NoLoss : public Regressor {
   public:
    torch::Tensor training_step(const Batch&, int64_t) override { return {}; }
  };
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1));
  try {
    trainer.fit(std::make_shared<NoLoss>(), loader(regression_data(8), 4));
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("training_step must return a scalar loss"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, AFailedValidateCallsOnExceptionAndLeavesTheTrainerUsable) {
  class FailingValidation : public Regressor {
   public:
    bool fail = true;
    void validation_step(const Batch& batch, int64_t batch_idx) override {
      if (fail && batch_idx == 1) throw std::runtime_error("validation exploded");
      Regressor::validation_step(batch, batch_idx);
    }
  };
  std::string seen;
  auto callback = std::make_shared<lt::LambdaCallback>();
  callback->on_exception_fn = [&](lt::Trainer&, lt::LightningModule&, const std::exception& e) { seen = e.what(); };
  lt::Trainer trainer(lt::TrainerOptions().callbacks({callback}));
  auto model = std::make_shared<FailingValidation>();
  auto val = loader(regression_data(12), 4);
  EXPECT_THROW(trainer.validate(model, val), std::runtime_error);
  EXPECT_EQ(seen, "validation exploded");
  EXPECT_EQ(trainer.state().stage, lt::Stage::kNone);
  model->fail = false;
  EXPECT_EQ(trainer.validate(model, val).count("val_loss"), 1u);
}

// Sizes may differ from batch to batch (variable-length sequences), but not
// keys, dtypes or ranks.
TEST_F(TrainerTest, BadBatchNamesBothShapes) {
  class BadRows : public lt::Dataset {
   public:
    int64_t size() const override { return 12; }
    Batch get(int64_t i) const override {
      return {torch::ones({4}, i >= 8 ? torch::kDouble : torch::kFloat), torch::zeros({1})};  // 8..: double
    }
  };
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1));
  try {
    trainer.fit(std::make_shared<Regressor>(),
                std::make_shared<lt::DataLoader>(std::make_shared<BadRows>(), lt::DataLoaderOptions(4)));
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_STREQ(e.what(),
                 "bad batch at epoch 0, batch 2 (global step 2, rank 0): data [4, 4] Double, target [4, 1] Float; "
                 "the epoch's first batch had data [4, 4] Float, target [4, 1] Float (every batch must have the "
                 "same keys, dtypes and numbers of dimensions)");
  }
}

}  // namespace

namespace {

// Lightning's Trainer(deterministic=True) needs no seed: deterministic
// algorithms are switched on when the Trainer is built.
TEST(Deterministic, TakesEffectWithoutASeed) {
  at::globalContext().setDeterministicAlgorithms(false, false);
  { lt::Trainer plain(lt::TrainerOptions().enable_progress_bar(false)); }
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
  { lt::Trainer deterministic(lt::TrainerOptions().deterministic(true).enable_progress_bar(false)); }
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_FALSE(at::globalContext().deterministicAlgorithmsWarnOnly());
  at::globalContext().setDeterministicAlgorithms(false, false);
}

}  // namespace

namespace {

// Lightning's fast_dev_run: n batches of each loop, one epoch, no sanity
// check, and nothing written: no checkpoint, no log folder, no metrics.
TEST_F(TrainerTest, FastDevRunRunsNBatchesOfEachLoopAndWritesNothing) {
  char tmpl[] = "/tmp/lt_fast_dev_run_XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  auto model = std::make_shared<Regressor>();
  auto options = lt::TrainerOptions()
                     .fast_dev_run(2)
                     .max_epochs(5)
                     .default_root_dir(dir.string())
                     .logger(std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir.string())))
                     .callbacks({std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().save_last(true))})
                     .enable_progress_bar(false);
  lt::Trainer trainer(options);
  trainer.fit(model, loader(regression_data(40), 4), loader(regression_data(40, 8), 4));
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_EQ(model->training_steps, 2);
  EXPECT_EQ(model->validation_steps, 2) << "no sanity check, one validation of 2 batches";
  trainer.validate(model, loader(regression_data(40, 8), 4));
  EXPECT_EQ(model->validation_steps, 4);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "fast_dev_run wrote into " << dir;
  std::filesystem::remove_all(dir);
  // n = 0 is off; negative counts are refused.
  EXPECT_THROW(lt::Trainer(lt::TrainerOptions().fast_dev_run(-1)), lt::ValueError);
}

// Lightning's overfit_batches: the same first batches every epoch, for
// training and validation, whatever the loader's shuffle.
TEST_F(TrainerTest, OverfitBatchesTrainsOnTheSameFirstBatchesInOrder) {
  class Recorder : public Regressor {
   public:
    torch::Tensor training_step(const Batch& batch, int64_t i) override {
      seen.push_back(batch.data[0][0].item<float>());
      return Regressor::training_step(batch, i);
    }
    std::vector<float> seen;
  };
  auto data = regression_data(40);
  auto shuffled = std::make_shared<lt::DataLoader>(data, lt::DataLoaderOptions(4).shuffle(true).seed(3));
  auto model = std::make_shared<Recorder>();
  std::vector<std::string> warnings;
  auto previous = lt::set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  lt::Trainer trainer(lt::TrainerOptions().overfit_batches(3).max_epochs(3).num_sanity_val_steps(0)
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(model, shuffled, loader(regression_data(40, 8), 4));
  lt::set_warning_handler(previous);
  std::vector<float> first;
  for (int64_t i = 0; i < 3; ++i) first.push_back(data->data()[i * 4][0].item<float>());
  ASSERT_EQ(model->seen.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(model->seen[i], first[i % 3]) << "batch " << i;
  EXPECT_EQ(model->validation_steps, 9) << "3 validation batches per epoch";
  EXPECT_EQ(std::count_if(warnings.begin(), warnings.end(),
                          [](const std::string& w) {
                            return w.find("We are turning off the training dataloader shuffling for you.") !=
                                   std::string::npos;
                          }),
            1);
}

}  // namespace
