// loops/optimization/manual.h on one process: manual optimization steps, and
// Lightning's GAN pattern (two optimizers, each step with the other's
// parameters toggled off) equal to the hand-written loop and resumed.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

TEST_F(TrainerTest, ManualOptimization) {
  auto model = std::make_shared<ManualRegressor>();
  auto before = model->fc1->weight.clone();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1));
  trainer.fit(model, loader(regression_data(12), 4));
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_FALSE(torch::equal(before, model->fc1->weight));
}

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
