// Core trainer behaviour on one process: parity with a hand-written LibTorch
// loop, hook order, step/batch limits, validation cadence, replaceable loops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/blas.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/profiler.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/row_stream.h"
#include "support/seeding.h"

namespace {

using lt::Batch;

struct TrainerTest : lt::testing::SeedingFixture {};

// y = x·w + noise, 4 features.
std::shared_ptr<lt::TensorDataset> regression_data(int64_t n, uint64_t seed = 7) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto x = torch::randn({n, 4}, gen);
  auto y = x.matmul(torch::tensor({{1.0f}, {-2.0f}, {0.5f}, {3.0f}})) + 0.1 * torch::randn({n, 1}, gen);
  return std::make_shared<lt::TensorDataset>(x, y);
}

class Regressor : public lt::LightningModule {
 public:
  explicit Regressor(double lr = 0.05) : lr_(lr) {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    ++training_steps;
    auto loss = torch::mse_loss(forward(batch.data), batch.target);
    log("loss", loss);
    return loss;
  }
  void validation_step(const Batch& batch, int64_t) override {
    ++validation_steps;
    log("val_loss", torch::mse_loss(forward(batch.data), batch.target));
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_).momentum(0.9));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  int64_t training_steps = 0;
  int64_t validation_steps = 0;
  double lr_;
};

std::shared_ptr<lt::DataLoader> loader(std::shared_ptr<lt::TensorDataset> data, int64_t batch_size) {
  return std::make_shared<lt::DataLoader>(std::move(data), lt::DataLoaderOptions(batch_size));
}

// The reference: what a user writes by hand in LibTorch.
// `skipped`: the optimizer steps (counted from 0) not taken; their gradients are dropped.
void hand_written_fit(Regressor& model, const lt::TensorDataset& data, int64_t batch_size, int64_t epochs,
                      int64_t accumulate, double clip_norm, const std::set<int64_t>& skipped = {}) {
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const int64_t n = data.size(), batches = (n + batch_size - 1) / batch_size;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i < batches; ++i) {
      auto x = data.data().slice(0, i * batch_size, std::min(n, (i + 1) * batch_size));
      auto y = data.targets().slice(0, i * batch_size, std::min(n, (i + 1) * batch_size));
      auto loss = torch::mse_loss(model.forward(x), y) / static_cast<double>(accumulate);
      loss.backward();
      if ((i + 1) % accumulate == 0 || i + 1 == batches) {
        if (clip_norm > 0) torch::nn::utils::clip_grad_norm_(model.parameters(), clip_norm);
        if (skipped.count(steps++) == 0) optimizer.step();
        optimizer.zero_grad();
      }
    }
  }
}

void expect_same_parameters(Regressor& a, Regressor& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key() << "\n" << p.value() << "\nvs\n" << pb[p.key()];
  }
}

struct ParityCase {
  int64_t accumulate;
  double clip;
};

class TrainerParity : public TrainerTest, public ::testing::WithParamInterface<ParityCase> {};

TEST_P(TrainerParity, MatchesHandWrittenLoopStepForStep) {
  const auto [accumulate, clip] = GetParam();
  auto data = regression_data(22);  // 6 batches of 4: the last one is short
  torch::manual_seed(1);
  auto model = std::make_shared<Regressor>();
  torch::manual_seed(1);
  Regressor reference;
  expect_same_parameters(*model, reference);

  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(accumulate).gradient_clip_val(clip));
  trainer.fit(model, loader(data, 4));
  hand_written_fit(reference, *data, 4, 3, accumulate, clip);

  expect_same_parameters(*model, reference);
  const int64_t steps_per_epoch = (6 + accumulate - 1) / accumulate;
  EXPECT_EQ(trainer.global_step(), 3 * steps_per_epoch);
  EXPECT_EQ(model->training_steps, 18);
}

INSTANTIATE_TEST_SUITE_P(AccumulateAndClip, TrainerParity,
                         ::testing::Values(ParityCase{1, 0.0}, ParityCase{3, 0.0}, ParityCase{3, 0.5},
                                           ParityCase{4, 0.25}));

TEST_F(TrainerTest, GradientClipValueMatchesClipGradValue) {
  auto data = regression_data(16);
  torch::manual_seed(3);
  auto model = std::make_shared<Regressor>();
  torch::manual_seed(3);
  Regressor reference;
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).gradient_clip_val(0.01).gradient_clip_algorithm(
      lt::GradientClipAlgorithm::kValue));
  trainer.fit(model, loader(data, 4));
  torch::optim::SGD optimizer(reference.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t i = 0; i < 4; ++i) {
    auto loss = torch::mse_loss(reference.forward(data->data().slice(0, 4 * i, 4 * i + 4)),
                                data->targets().slice(0, 4 * i, 4 * i + 4));
    loss.backward();
    torch::nn::utils::clip_grad_value_(reference.parameters(), 0.01);
    optimizer.step();
    optimizer.zero_grad();
  }
  expect_same_parameters(*model, reference);
}

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

// The Regressor's step under manual optimization.
class ManualRegressor : public Regressor {
 public:
  ManualRegressor() { set_automatic_optimization(false); }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(forward(batch.data), batch.target);
    optimizer().zero_grad();
    manual_backward(loss);
    optimizer_step();
    return loss;
  }
};

TEST_F(TrainerTest, ManualOptimization) {
  auto model = std::make_shared<ManualRegressor>();
  auto before = model->fc1->weight.clone();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1));
  trainer.fit(model, loader(regression_data(12), 4));
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_FALSE(torch::equal(before, model->fc1->weight));
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

}  // namespace

namespace {

// -- non-finite values and bad batches -----------------------------------------------

class NanAtBatch : public Regressor {
 public:
  explicit NanAtBatch(int64_t bad) : bad_(bad) {}
  torch::Tensor training_step(const Batch& batch, int64_t idx) override {
    auto loss = Regressor::training_step(batch, idx);
    return idx == bad_ ? loss * std::numeric_limits<float>::quiet_NaN() : loss;
  }
  int64_t bad_;
};

TEST_F(TrainerTest, NonFiniteLossStopsNamingTheStep) {
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1));
  try {
    trainer.fit(std::make_shared<NanAtBatch>(2), loader(regression_data(16), 4));
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_STREQ(e.what(),
                 "non-finite loss nan at epoch 0, batch 2, global step 2 (trainer.on_nonfinite=error; use skip_step "
                 "to skip such steps)");
  }
  // Accumulating, the window's losses are checked with its gradients at its
  // end, in one host sync: the loss of its first micro-batch is named, and
  // no step is taken on the window's non-finite gradients.
  auto model = std::make_shared<NanAtBatch>(2);
  lt::Trainer accumulating(lt::TrainerOptions().max_epochs(1).accumulate_grad_batches(2));
  try {
    accumulating.fit(model, loader(regression_data(16), 4));
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_STREQ(e.what(),
                 "non-finite loss nan at epoch 0, batch 2, global step 1 (trainer.on_nonfinite=error; use skip_step "
                 "to skip such steps)");
  }
  for (const auto& p : model->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

TEST_F(TrainerTest, NonFiniteGradientsAreSkippedOnRequest) {
  class NanGrad : public Regressor {
   public:
    void on_after_backward() override {
      if (global_step() == 1) fc2->bias.mutable_grad().fill_(std::numeric_limits<float>::infinity());
    }
  };
  auto model = std::make_shared<NanGrad>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).on_nonfinite(lt::NonFinitePolicy::kSkipStep));
  std::vector<std::string> warnings;
  auto previous = lt::set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  trainer.fit(model, loader(regression_data(16), 4));
  lt::set_warning_handler(previous);
  // A word at the first skip, and the count at the end of fit.
  std::string said;
  for (const auto& w : warnings) said += w + "\n";
  EXPECT_NE(said.find("on_nonfinite: skip_step: skipped the optimizer step at epoch 0, global step 1 (non-finite "
                      "gradient in parameter 'fc2.bias')"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("on_nonfinite: skip_step: 1 of 4 optimizer steps were skipped for non-finite gradients\n"),
            std::string::npos)
      << said;
  EXPECT_EQ(trainer.state().skipped_steps, 1);
  EXPECT_EQ(trainer.global_step(), 4);
  for (const auto& p : model->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());

  auto model2 = std::make_shared<NanGrad>();
  lt::Trainer strict(lt::TrainerOptions().max_epochs(1));
  try {
    strict.fit(model2, loader(regression_data(16), 4));
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite gradient in parameter 'fc2.bias' at epoch 0, batch 1, global "
                                         "step 1"),
              std::string::npos)
        << e.what();
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

// -- streams (IterableDataset) -----------------------------------------------------

std::vector<torch::Tensor> weights(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// A stream trains as the same rows through a map-style loader: 18 rows in
// batches of 4 (the last of 2, alone in its accumulation window: the stream
// is read one batch ahead to know it is the last), accumulating 2, over 2
// epochs; of unknown length and of known length; and resumed from a
// mid-epoch checkpoint.
TEST_F(TrainerTest, AStreamTrainsLikeTheMapStyleLoader) {
  const auto rows = regression_data(18);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("lt_stream_" + std::to_string(::getpid()))).string();
  auto run = [&](std::shared_ptr<lt::DataLoader> loader, std::vector<std::shared_ptr<lt::Callback>> callbacks,
                 const std::string& ckpt_path) {
    torch::manual_seed(0);
    auto model = std::make_shared<Regressor>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).accumulate_grad_batches(2).enable_progress_bar(false)
                            .default_root_dir(dir).callbacks(callbacks));
    trainer.fit(model, loader, nullptr, ckpt_path);
    EXPECT_EQ(trainer.global_step(), 6);
    return weights(*model);
  };
  auto stream = [&](bool known) {
    auto rows_stream = std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets(), known);
    return std::make_shared<lt::DataLoader>(rows_stream, lt::DataLoaderOptions(4));
  };
  const auto expected = run(std::make_shared<lt::DataLoader>(rows, lt::DataLoaderOptions(4)), {}, "");
  auto every = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath(dir).every_n_train_steps(1).save_top_k(-1));
  for (bool known : {false, true}) {
    const auto got = run(stream(known), {every}, "");
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(expected[i])) << "known " << known << " " << i;
  }
  // Step 2 is mid-epoch 0 (4 of its 5 batches done): the resumed stream skips 16 rows.
  const std::string mid = dir + "/epoch=0-step=2.ckpt";
  ASSERT_EQ(lt::pickle_load_file(mid).toGenericDict().at("epoch_iteration").toInt(), 4);
  const auto resumed = run(stream(false), {}, mid);
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(resumed[i].equal(expected[i])) << "resumed " << i;
  std::filesystem::remove_all(dir);
}

TEST_F(TrainerTest, WhatAStreamOfUnknownLengthCannotDoIsRefused) {
  const auto rows = regression_data(22);
  auto stream = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets()), lt::DataLoaderOptions(4));
  auto error = [&](lt::TrainerOptions options, std::shared_ptr<lt::DataLoader> val) {
    lt::Trainer trainer(options.max_epochs(1).enable_progress_bar(false));
    try {
      trainer.fit(std::make_shared<Regressor>(), stream, val);
    } catch (const lt::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("<trained>");
  };
  EXPECT_NE(error(lt::TrainerOptions().limit_train_batches(0.5), nullptr).find(
                "limit_train_batches: 0.5 is a fraction of the epoch, and this data is a stream of unknown length"),
            std::string::npos);
  EXPECT_NE(error(lt::TrainerOptions().val_check_interval(0.5), std::make_shared<lt::DataLoader>(rows, 4))
                .find("val_check_interval: validation within the epoch needs the epoch's length"),
            std::string::npos);
  EXPECT_NE(error(lt::TrainerOptions().limit_val_batches(0.25), stream)
                .find("limit_val_batches: 0.25 is a fraction of the epoch, and this data is a stream"),
            std::string::npos);
  // A count limit stops the stream there.
  lt::Trainer limited(lt::TrainerOptions().max_epochs(1).limit_train_batches(3).enable_progress_bar(false));
  limited.fit(std::make_shared<Regressor>(), stream);
  EXPECT_EQ(limited.global_step(), 3);
}

// Validation, test and predict read a stream as a map-style loader of the
// same rows: the same metrics and predictions, without and with loader
// workers (each reading every other batch), of unknown and known length;
// a count limit stops the stream there.
TEST_F(TrainerTest, StreamsValidateTestAndPredictLikeTheMapStyleLoader) {
  class Evaluated : public Regressor {
   public:
    void test_step(const Batch& batch, int64_t) override {
      log("test_loss", torch::mse_loss(forward(batch.data), batch.target));
    }
    torch::Tensor predict_step(const Batch& batch, int64_t) override { return forward(batch.data); }
  };
  const auto rows = regression_data(18);  // 5 batches of 4, the last of 2
  auto stream = [&](bool known, int64_t workers) {
    return std::make_shared<lt::DataLoader>(
        std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets(), known, /*block=*/4),
        lt::DataLoaderOptions(4).num_workers(workers));
  };
  torch::manual_seed(0);
  auto model = std::make_shared<Evaluated>();
  lt::Trainer trainer(lt::TrainerOptions().enable_progress_bar(false));
  const auto val = trainer.validate(model, loader(rows, 4));
  const auto test = trainer.test(model, loader(rows, 4));
  const auto predicted = torch::cat(trainer.predict(model, loader(rows, 4)));
  ASSERT_EQ(predicted.size(0), 18);
  for (bool known : {false, true}) {
    for (int64_t workers : {0, 2}) {
      const std::string where = c10::str("known ", known, ", workers ", workers);
      EXPECT_DOUBLE_EQ(trainer.validate(model, stream(known, workers)).at("val_loss"), val.at("val_loss")) << where;
      EXPECT_DOUBLE_EQ(trainer.test(model, stream(known, workers)).at("test_loss"), test.at("test_loss")) << where;
      EXPECT_TRUE(torch::equal(torch::cat(trainer.predict(model, stream(known, workers))), predicted)) << where;
    }
  }
  // In fit, the sanity check and each epoch's validation run over the stream to its end, or its count limit.
  auto validations = [&](lt::TrainerOptions options) {
    auto fresh = std::make_shared<Evaluated>();
    lt::Trainer fitting(options.max_epochs(2).enable_progress_bar(false));
    fitting.fit(fresh, loader(rows, 4), stream(false, 2));
    return fresh->validation_steps;
  };
  EXPECT_EQ(validations(lt::TrainerOptions().num_sanity_val_steps(-1)), 5 + 2 * 5);
  EXPECT_EQ(validations(lt::TrainerOptions().num_sanity_val_steps(2).limit_val_batches(3)), 2 + 2 * 3);
}

// -- the BLAS behind LibTorch ------------------------------------------------------

// Run by Blas.* in a child process (LT_BLAS_CHILD=1) under another libblas.so.3.
TEST(BlasChild, ConstructsTrainersAndTellsTheBlas) {
  if (std::getenv("LT_BLAS_CHILD") == nullptr) GTEST_SKIP() << "run by Blas.* in a child process";
  lt::Trainer first;
  lt::Trainer second;
  const lt::BlasInfo info = lt::blas_info();
  std::printf("blas_info: %s reference=%d openblas=%d core=%s\n", info.library.c_str(), info.reference,
              !info.openblas_config.empty(), info.openblas_core.c_str());
}

// What a process under `libblas_dir`/libblas.so.3 prints (stdout and stderr),
// with `environment` ("NAME=value ...") added.
std::string run_under_blas(const std::filesystem::path& libblas_dir, const std::string& environment = "") {
  const std::string command = environment + " LT_BLAS_CHILD=1 LD_LIBRARY_PATH=" + libblas_dir.string() +
                              " /proc/" + std::to_string(::getpid()) + "/exe --gtest_filter=BlasChild.* 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

// Whether the LibTorch built against multiplies through the process's
// libblas.so.3 (Debian's does; PyPI's 2.x has MKL linked into libtorch_cpu.so).
bool torch_calls_libblas() { return lt::blas_info().library.find("libblas.so") != std::string::npos; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Under Debian's reference BLAS a Trainer warns, once per process, naming the
// library and the package to install; under OpenBLAS it says nothing.
TEST(Blas, TheReferenceBlasIsWarnedAboutOnce) {
  std::filesystem::path lib;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib")) {
    if (std::filesystem::exists(entry.path() / "blas" / "libblas.so.3")) lib = entry.path();
  }
  if (lib.empty() || !std::filesystem::exists(lib / "openblas-openmp" / "libblas.so.3")) {
    GTEST_SKIP() << "needs Debian's reference BLAS (libblas3) and OpenBLAS (libopenblas0-openmp) installed";
  }
  if (!torch_calls_libblas()) GTEST_SKIP() << "this LibTorch has a BLAS of its own: " << lt::blas_info().library;
  const std::string reference = run_under_blas(lib / "blas");
  const std::string warning = "lightning-cpp warning: LibTorch calls the reference BLAS (" +
                              std::filesystem::canonical(lib / "blas" / "libblas.so.3").string() + ")";
  EXPECT_EQ(count(reference, warning), 1u) << reference;
  EXPECT_NE(reference.find("apt-get install libopenblas0-openmp"), std::string::npos) << reference;
  EXPECT_NE(reference.find("reference=1 openblas=0"), std::string::npos) << reference;
  const std::string openblas = run_under_blas(lib / "openblas-openmp");
  EXPECT_EQ(openblas.find("reference BLAS"), std::string::npos) << openblas;
  EXPECT_NE(openblas.find("blas_info: " + std::filesystem::canonical(lib / "openblas-openmp" / "libblas.so.3")
                              .string() + " reference=0 openblas=1"),
            std::string::npos)
      << openblas;
}

// OpenBLAS on kernels older than the CPU (as it falls back to Prescott's on a
// CPU model it does not know): a Trainer warns once with the OPENBLAS_CORETYPE
// to set; on the kernels it names, it says nothing.
TEST(Blas, OpenBlasOnKernelsOlderThanTheCpuIsWarnedAbout) {
  const lt::CpuInfo& cpu = lt::cpu_info();
  if (!cpu.has("avx2") || !cpu.has("fma")) GTEST_SKIP() << "needs a CPU with AVX2 and FMA";
  std::filesystem::path lib;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib")) {
    if (std::filesystem::exists(entry.path() / "openblas-openmp" / "libblas.so.3")) lib = entry.path();
  }
  if (lib.empty()) GTEST_SKIP() << "needs OpenBLAS (libopenblas0-openmp) installed";
  if (!torch_calls_libblas()) GTEST_SKIP() << "this LibTorch has a BLAS of its own: " << lt::blas_info().library;
  const std::string coretype = lt::openblas_coretype_advice(lt::BlasInfo{"", "", "Prescott"}, cpu);
  ASSERT_TRUE(coretype == "SkylakeX" || coretype == "Haswell") << coretype;
  const std::string old = run_under_blas(lib / "openblas-openmp", "OPENBLAS_CORETYPE=Prescott");
  EXPECT_NE(old.find("core=Prescott"), std::string::npos) << old;
  EXPECT_EQ(count(old, "lightning-cpp warning: OpenBLAS does not know this CPU"), 1u) << old;
  EXPECT_NE(old.find("export OPENBLAS_CORETYPE=" + coretype), std::string::npos) << old;
  const std::string advised = run_under_blas(lib / "openblas-openmp", "OPENBLAS_CORETYPE=" + coretype);
  EXPECT_NE(advised.find("core=" + coretype), std::string::npos) << advised;
  EXPECT_EQ(advised.find("OpenBLAS does not know"), std::string::npos) << advised;
}

// The advice by kernels and CPU, whatever this machine is.
TEST(Blas, TheCoreTypeAdviceFollowsTheCpusVectorUnits) {
  const lt::CpuInfo avx2{"an AVX2 CPU", {"avx2", "fma"}};
  const lt::CpuInfo avx512{"an AVX-512 CPU", {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}};
  const lt::CpuInfo old{"an SSE CPU", {"sse3"}};
  const auto advice = [](const char* core, const lt::CpuInfo& cpu) {
    return lt::openblas_coretype_advice(lt::BlasInfo{"libopenblas.so.0", "", core}, cpu);
  };
  EXPECT_EQ(advice("Prescott", avx2), "Haswell");
  EXPECT_EQ(advice("Haswell", avx2), "");
  EXPECT_EQ(advice("Zen", avx2), "");
  EXPECT_EQ(advice("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(advice("Haswell", avx512), "SkylakeX");  // an AMD EPYC of family 26: sgemm 91 -> 171 GFLOP/s
  EXPECT_EQ(advice("Zen", avx512), "SkylakeX");
  EXPECT_EQ(advice("SkylakeX", avx512), "");
  EXPECT_EQ(advice("Cooperlake", avx512), "");
  EXPECT_EQ(advice("Prescott", old), "");   // nothing better to run
  EXPECT_EQ(lt::openblas_coretype_advice(lt::BlasInfo{"/usr/lib/libblas.so.3", "", ""}, avx512), "");  // not OpenBLAS
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

namespace {

// Lightning's GAN pattern: two optimizers under manual optimization, each
// step with the other's parameters toggled off.
class TwoOptimizers : public lt::LightningModule {
 public:
  TwoOptimizers() {
    set_automatic_optimization(false);
    a = register_module("a", torch::nn::Linear(4, 4));
    b = register_module("b", torch::nn::Linear(4, 1));
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    toggle_optimizer(0);
    toggled_off = toggled_off && !b->weight.requires_grad() && a->weight.requires_grad();
    auto loss_a = torch::mse_loss(b(torch::tanh(a(batch.data))), batch.target);
    optimizer(0).zero_grad();
    manual_backward(loss_a);
    optimizer_step(0);
    untoggle_optimizer(0);
    toggled_back = toggled_back && b->weight.requires_grad();
    toggle_optimizer(1);
    auto loss_b = torch::mse_loss(b(torch::tanh(a(batch.data)).detach()), -batch.target);
    optimizer(1).zero_grad();
    manual_backward(loss_b);
    optimizer_step(1);
    untoggle_optimizer(1);
    return loss_b;
  }
  lt::OptimizerConfig configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
            std::make_shared<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9))};
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
  bool toggled_off = true, toggled_back = true;
};

void hand_written_two_optimizers(TwoOptimizers& m, const lt::TensorDataset& data, int64_t batch, int64_t epochs) {
  torch::optim::SGD opt_a(m.a->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD opt_b(m.b->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i * batch < data.size(); ++i) {
      auto x = data.data().slice(0, i * batch, (i + 1) * batch), y = data.targets().slice(0, i * batch, (i + 1) * batch);
      opt_a.zero_grad();
      torch::mse_loss(m.b(torch::tanh(m.a(x))), y).backward();
      opt_a.step();
      opt_b.zero_grad();
      torch::mse_loss(m.b(torch::tanh(m.a(x)).detach()), -y).backward();
      opt_b.step();
    }
  }
}

TEST_F(TrainerTest, TwoOptimizersWithManualOptimizationEqualTheHandWrittenLoopAndResume) {
  auto data = regression_data(32);
  torch::manual_seed(3);
  auto model = std::make_shared<TwoOptimizers>();
  torch::manual_seed(3);
  TwoOptimizers reference;
  auto options = lt::TrainerOptions().max_epochs(2).enable_progress_bar(false).enable_model_summary(false);
  lt::Trainer trainer(options);
  trainer.fit(model, loader(data, 8));
  hand_written_two_optimizers(reference, *data, 8, 2);
  EXPECT_EQ(trainer.global_step(), 16) << "two optimizer steps per batch";
  EXPECT_TRUE(model->toggled_off && model->toggled_back);
  for (const auto& p : reference.named_parameters()) {
    EXPECT_TRUE(torch::allclose(p.value(), model->named_parameters()[p.key()], 1e-6, 1e-7)) << p.key();
  }
  // Both optimizers' momentum survives a checkpoint: 1 epoch, then 1 more from it, equals 2 at once.
  char tmpl[] = "/tmp/lt_two_optimizers_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl), ckpt = dir + "/last.ckpt";
  torch::manual_seed(3);
  auto first = std::make_shared<TwoOptimizers>();
  lt::Trainer one(lt::TrainerOptions(options).max_epochs(1).callbacks(
      {std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir).save_last(true))}));
  one.fit(first, loader(data, 8));
  auto resumed = std::make_shared<TwoOptimizers>();
  lt::Trainer two(options);
  two.fit(resumed, loader(data, 8), nullptr, ckpt);
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), resumed->named_parameters()[p.key()])) << p.key();
  }
  std::filesystem::remove_all(std::filesystem::path(ckpt).parent_path());
  // Automatic optimization takes one optimizer, as Lightning.
  class Automatic : public TwoOptimizers {
   public:
    Automatic() { set_automatic_optimization(true); }
    torch::Tensor training_step(const Batch& batch, int64_t) override {
      return torch::mse_loss(b(torch::tanh(a(batch.data))), batch.target);
    }
  };
  lt::Trainer automatic(options);
  EXPECT_THROW(automatic.fit(std::make_shared<Automatic>(), loader(data, 8)), lt::ValueError);
}

}  // namespace

namespace {

// Lightning's profiler: "simple" counts and times every loop phase and hook.
TEST_F(TrainerTest, SimpleProfilerTimesEveryPhaseAndHook) {
  auto profiler = std::make_shared<lt::SimpleProfiler>();
  auto hook = std::make_shared<lt::LambdaCallback>("Probe");
  hook->on_train_batch_end_fn = [](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const Batch&, int64_t) {};
  std::vector<std::string> printed;
  auto previous = lt::set_info_handler([&](const std::string& m) { printed.push_back(m); });
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).profiler(profiler).callbacks({hook})
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(std::make_shared<Regressor>(), loader(regression_data(20), 4), loader(regression_data(8, 9), 4));
  lt::set_info_handler(previous);
  const auto& stats = profiler->stats();
  const auto calls = [&](const std::string& action) {
    auto it = stats.find(action);
    return it == stats.end() ? int64_t{-1} : it->second.calls;
  };
  EXPECT_EQ(calls("run_training_epoch"), 2);
  EXPECT_EQ(calls("[_TrainingEpochLoop].train_dataloader_next"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.training_step"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.backward"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.optimizer_step"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.validation_step"), 2 + 2 * 2) << "sanity check and two validations";
  EXPECT_EQ(calls("[Callback]Probe.on_train_batch_end"), 10);
  EXPECT_EQ(calls("[Callback]Probe.on_fit_start"), 1);
  EXPECT_LE(stats.at("[Strategy]single_device.training_step").total_s, stats.at("run_training_epoch").total_s);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0].rfind("FIT Profiler Report", 0), 0u) << printed[0];
  EXPECT_NE(printed[0].find("|  run_training_epoch"), std::string::npos) << printed[0];
}

// "pytorch" (or "torch"): LibTorch's autograd profiler over the stage, a
// Chrome trace with the operators inside our named actions.
TEST_F(TrainerTest, TorchProfilerWritesAChromeTrace) {
  char tmpl[] = "/tmp/lt_torch_profiler_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto profiler = std::make_shared<lt::TorchProfiler>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).profiler(profiler).default_root_dir(dir)
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(std::make_shared<Regressor>(), loader(regression_data(8), 4));
  ASSERT_EQ(profiler->trace_file(), dir + "/lightning_logs/version_0/train-trace-rank0.json") << "in the log_dir";
  const std::string script = "import json,sys; e=json.load(open(sys.argv[1])); e=e['traceEvents'] if "
                             "isinstance(e, dict) else e; n={x.get('name') for x in e}; "
                             "sys.exit(0 if {'aten::addmm','[Strategy]single_device.training_step'} <= n else 1)";
  EXPECT_EQ(std::system(("/usr/bin/python3 -c \"" + script + "\" " + profiler->trace_file()).c_str()), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

class DtypeProbe : public Regressor {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t i) override {
    train_dtype = fc1(batch.data).scalar_type();
    return Regressor::training_step(batch, i);
  }
  void validation_step(const Batch& batch, int64_t i) override {
    val_dtype = fc1(batch.data).scalar_type();
    Regressor::validation_step(batch, i);
  }
  c10::ScalarType train_dtype = c10::ScalarType::Undefined, val_dtype = c10::ScalarType::Undefined;
};

// Lightning's precision="bf16-mixed" on the CPU: the forward's linear layers
// run in bfloat16 (autocast), parameters and gradients stay float32, and
// training tracks float32 closely (measured here: the largest parameter
// difference after 3 epochs 0.030, asked < 0.05; the validation loss within 2%).
TEST_F(TrainerTest, Bf16MixedTracksFloat32) {
  auto data = regression_data(64);
  auto run = [&](const std::string& precision) {
    torch::manual_seed(5);
    auto model = std::make_shared<DtypeProbe>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).precision(precision).enable_progress_bar(false)
                            .enable_model_summary(false).num_sanity_val_steps(0));
    trainer.fit(model, loader(data, 8), loader(regression_data(32, 9), 8));
    return std::make_pair(model, trainer.callback_metrics().at("val_loss"));
  };
  auto [full, full_loss] = run("32-true");
  auto [mixed, mixed_loss] = run("bf16-mixed");
  EXPECT_EQ(full->train_dtype, torch::kFloat);
  EXPECT_EQ(mixed->train_dtype, torch::kBFloat16);
  EXPECT_EQ(mixed->val_dtype, torch::kBFloat16);
  EXPECT_EQ(mixed->fc1->weight.scalar_type(), torch::kFloat) << "parameters stay float32";
  EXPECT_FALSE(lt::compat::autocast_enabled(c10::kCPU)) << "autocast ends with the forward";
  double largest = 0;
  for (const auto& p : full->named_parameters()) {
    largest = std::max(largest, (p.value() - mixed->named_parameters()[p.key()]).abs().max().item<double>());
  }
  EXPECT_GT(largest, 0.0) << "bfloat16 rounding changes the result";
  EXPECT_LT(largest, 0.05);
  EXPECT_NEAR(mixed_loss, full_loss, 0.02 * full_loss);
  std::printf("bf16-mixed vs 32-true: largest parameter difference %.4f, val_loss %.5f vs %.5f\n", largest,
              mixed_loss, full_loss);
}

// bf16-mixed where the CPU multiplies bfloat16 slower than float32 (no
// avx512_bf16 or amx_bf16: 0.07x the steps/s of 32-true on a Zen 3) warns
// with the measured ratio, the CPU and the fix; where it is faster, nothing.
TEST_F(TrainerTest, Bf16MixedWarnsWhereTheCpuMultipliesBf16Slowly) {
  const lt::CpuInfo zen3{"AMD EPYC 7R13 48-Core Processor", {"avx2", "fma"}};
  const std::string warning = lt::bf16_slow_warning(0.07, zen3);
  for (const char* part : {"AMD EPYC 7R13", "at 0.07x the speed of float32", "it lacks avx512_bf16 or amx_bf16",
                           "Use precision 32-true"}) {
    EXPECT_NE(warning.find(part), std::string::npos) << part << " not in: " << warning;
  }
  EXPECT_EQ(lt::bf16_slow_warning(1.43, zen3), "");
  // This machine: measured, and what its units predict.
  const lt::CpuInfo& cpu = lt::cpu_info();
  const double ratio = lt::bf16_matmul_speed_ratio();
  std::printf("this CPU (%s): bfloat16 matmul at %.2fx float32's\n", cpu.model.c_str(), ratio);
  ASSERT_TRUE(std::isfinite(ratio) && ratio > 0) << ratio;
  if (cpu.has("avx512_bf16") || cpu.has("amx_bf16")) EXPECT_GT(ratio, 0.5) << "native bf16, yet slow";
  if (cpu.known() && !cpu.has("avx512f")) EXPECT_LT(ratio, 0.5) << "no avx512 at all, yet bf16 is fast";
}

// precision="64-true": the module and the inputs in float64, equal to the
// hand-written float64 loop.
TEST_F(TrainerTest, SixtyFourTrueEqualsTheHandWrittenDoubleLoop) {
  auto data = regression_data(32);
  torch::manual_seed(5);
  auto model = std::make_shared<Regressor>();
  torch::manual_seed(5);
  Regressor reference;
  reference.to(torch::kFloat64);
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).precision("64-true").enable_progress_bar(false)
                          .enable_model_summary(false));
  trainer.fit(model, loader(data, 8));
  hand_written_fit(reference, lt::TensorDataset(data->data().to(torch::kFloat64), data->targets().to(torch::kFloat64)),
                   8, 2, 1, 0.0);
  EXPECT_EQ(model->fc1->weight.scalar_type(), torch::kFloat64);
  expect_same_parameters(*model, reference);
  EXPECT_THROW(lt::Trainer(lt::TrainerOptions().precision("fp8")), lt::ValueError);
  try {
    lt::Trainer cuda_only(lt::TrainerOptions().precision("16-mixed"));
    FAIL() << "16-mixed without CUDA";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("16-mixed"), std::string::npos) << e.what();
  }
}

// 16-mixed's gradient scaler, checked on the CPU (lt::MixedPrecision built by
// hand: CUDA autocast leaves CPU tensors in float32, the scaler acts as on a
// GPU). With a power-of-two scale, scaling changes no rounding: every step
// taken equals the unscaled hand-written loop bitwise, with accumulation and
// clipping (which must see the unscaled gradients).
TEST_F(TrainerTest, GradScalerStepsEqualTheUnscaledLoop) {
  for (const auto [accumulate, clip] : {ParityCase{1, 0.0}, ParityCase{3, 0.5}}) {
    auto data = regression_data(22);  // 6 batches of 4
    torch::manual_seed(1);
    auto model = std::make_shared<Regressor>();
    torch::manual_seed(1);
    Regressor reference;
    auto precision = std::make_shared<lt::MixedPrecision>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(accumulate).gradient_clip_val(clip)
                            .precision_plugin(precision).enable_progress_bar(false).enable_model_summary(false));
    trainer.fit(model, loader(data, 4));
    hand_written_fit(reference, *data, 4, 3, accumulate, clip);
    expect_same_parameters(*model, reference);
    EXPECT_EQ(precision->scaler().get_scale(), 65536.0);
    EXPECT_EQ(precision->scaler().growth_tracker(), trainer.global_step()) << "every step counts toward growth";
  }
}

// A scale so large that the scaled loss overflows float32: those steps are
// skipped and the scale halves until it fits; every later step is taken. The
// result equals the hand-written loop that drops the first k steps, k =
// log2(initial / final scale), and every window still counts a global step.
TEST_F(TrainerTest, GradScalerSkipsOverflowingStepsAndBacksOff) {
  auto data = regression_data(22);
  torch::manual_seed(1);
  auto model = std::make_shared<Regressor>();
  torch::manual_seed(1);
  Regressor reference;
  const double initial = std::ldexp(1.0, 127);  // float32's largest power of two
  auto precision = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(initial));
  std::vector<double> scales;  // after each step
  auto probe = std::make_shared<lt::LambdaCallback>("ScaleProbe");
  probe->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
    scales.push_back(precision->scaler().get_scale());
  };
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).precision_plugin(precision).callbacks({probe})
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(model, loader(data, 4));
  ASSERT_EQ(scales.size(), 18u);
  EXPECT_EQ(trainer.global_step(), 18) << "a skipped step is still a global step, as in Lightning";
  std::set<int64_t> skipped;
  double before = initial;
  for (size_t i = 0; i < scales.size(); ++i) {
    if (scales[i] != before) {
      EXPECT_EQ(scales[i], before / 2) << "step " << i << ": backs off by half";
      skipped.insert(static_cast<int64_t>(i));
    }
    before = scales[i];
  }
  EXPECT_GT(skipped.size(), 1u) << "2^127 times the loss overflows float32";
  EXPECT_LT(skipped.size(), 18u);
  hand_written_fit(reference, *data, 4, 3, 1, 0.0, skipped);
  expect_same_parameters(*model, reference);
  std::string listing;
  for (auto i : skipped) listing += " " + std::to_string(i);
  std::printf("GradScaler: steps%s of 18 skipped, scale 2^127 -> %g\n", listing.c_str(), scales.back());
}

// The scale grows by growth_factor after growth_interval clean steps; its state
// is in the checkpoint under Lightning's key ("MixedPrecision", PyTorch's
// state_dict keys), and a resumed run goes on from it.
TEST_F(TrainerTest, GradScalerGrowsAndResumesFromTheCheckpoint) {
  char tmpl[] = "/tmp/lt_grad_scaler_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string path = dir + "/last.ckpt";
  auto data = regression_data(24);  // 6 steps an epoch
  const auto options = lt::GradScalerOptions().init_scale(4.0).growth_interval(4);
  auto run = [&](int64_t epochs, const std::string& ckpt_path) {
    auto precision = std::make_shared<lt::MixedPrecision>(options);
    auto checkpoint = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir).save_last(true));
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(epochs).precision_plugin(precision).callbacks({checkpoint})
                            .enable_progress_bar(false).enable_model_summary(false));
    trainer.fit(std::make_shared<Regressor>(), loader(data, 4), lt::FitOptions().ckpt_path(ckpt_path));
    return precision->scaler();
  };
  const lt::GradScaler first = run(1, "");
  std::filesystem::copy_file(path, dir + "/epoch0.ckpt");
  const lt::GradScaler uninterrupted = run(3, "");
  EXPECT_EQ(uninterrupted.get_scale(), 4.0 * 16) << "18 clean steps: grown 4 times";
  EXPECT_EQ(uninterrupted.growth_tracker(), 2);
  auto saved = lt::pickle_load_file(dir + "/epoch0.ckpt").toGenericDict();
  ASSERT_TRUE(saved.contains("MixedPrecision"));
  auto state = saved.at("MixedPrecision").toGenericDict();
  EXPECT_EQ(state.at("scale").toDouble(), first.get_scale());
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 2);
  EXPECT_EQ(state.at("growth_interval").toInt(), 4);
  const lt::GradScaler resumed = run(3, dir + "/epoch0.ckpt");
  EXPECT_EQ(resumed.get_scale(), uninterrupted.get_scale());
  EXPECT_EQ(resumed.growth_tracker(), uninterrupted.growth_tracker());
  EXPECT_THROW(lt::GradScaler(lt::GradScalerOptions().backoff_factor(1.5)), lt::ValueError);
  std::filesystem::remove_all(dir);
}

// Manual optimization: manual_backward scales, optimizer_step unscales (and
// would skip), as in the automatic loop: equal to the 32-true run bitwise.
TEST_F(TrainerTest, GradScalerUnderManualOptimizationEqualsFloat32) {
  auto data = regression_data(16);
  auto run = [&](std::shared_ptr<lt::Precision> precision) {
    torch::manual_seed(2);
    auto model = std::make_shared<ManualRegressor>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).precision_plugin(precision).enable_progress_bar(false)
                            .enable_model_summary(false));
    trainer.fit(model, loader(data, 4));
    return model;
  };
  auto scaled = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(1024).growth_interval(2));
  auto a = run(scaled);
  auto b = run(nullptr);
  expect_same_parameters(*a, *b);
  EXPECT_EQ(scaled->scaler().get_scale(), 1024.0 * 16) << "8 steps, growth every 2";
}

}  // namespace
