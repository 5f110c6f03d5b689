// loops/optimization/automatic.h on one process: step for step equal to a
// hand-written LibTorch loop (accumulation, gradient_clip_val by norm and by
// value), and non-finite losses and gradients stopped or skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

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

}  // namespace
