#pragma once
// What the trainer_test binary's files share: the seeded fixture, a small
// regression model and its data, and the reference they are held to: the
// same training written by hand in LibTorch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>

#include <lightning_cpp/trainer/trainer.h>

#include "support/seeding.h"

// One type for every file's TEST_F(TrainerTest, ...): gtest requires a test suite's tests to share their fixture class.
struct TrainerTest : lt::testing::SeedingFixture {};

namespace lt::testing {

// y = x·w + noise, 4 features.
inline std::shared_ptr<lt::TensorDataset> regression_data(int64_t n, uint64_t seed = 7) {
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

inline std::shared_ptr<lt::DataLoader> loader(std::shared_ptr<lt::TensorDataset> data, int64_t batch_size) {
  return std::make_shared<lt::DataLoader>(std::move(data), lt::DataLoaderOptions(batch_size));
}

// The reference: what a user writes by hand in LibTorch.
// `skipped`: the optimizer steps (counted from 0) not taken; their gradients are dropped.
inline void hand_written_fit(Regressor& model, const lt::TensorDataset& data, int64_t batch_size, int64_t epochs,
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

inline void expect_same_parameters(Regressor& a, Regressor& b) {
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

}  // namespace lt::testing
