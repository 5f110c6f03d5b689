#pragma once
// What the callbacks_test binary's files share: a module that logs a
// scripted val_loss per epoch, its data, and the seeded fixture with a folder
// of its own.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/trainer/trainer.h>

#include "support/seeding.h"

namespace lt::testing {

// Logs a scripted val_loss per epoch (and trains a tiny linear layer).
class ScriptedModule : public lt::LightningModule {
 public:
  explicit ScriptedModule(std::vector<double> val_losses, bool with_scheduler = false)
      : val_losses_(std::move(val_losses)), with_scheduler_(with_scheduler) {
    fc_ = register_module("fc", torch::nn::Linear(2, 1));
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto loss = torch::mse_loss(fc_(b.data), b.target);
    log("train_loss", loss, lt::LogOptions().prog_bar(true));
    return loss;
  }
  void validation_step(const lt::Batch&, int64_t) override {
    const size_t e = static_cast<size_t>(current_epoch());
    log("val_loss", e < val_losses_.size() ? val_losses_[e] : val_losses_.back());
  }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    if (!with_scheduler_) return opt;
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.5), lt::Interval::kEpoch);
  }

 private:
  std::vector<double> val_losses_;
  bool with_scheduler_;
  torch::nn::Linear fc_{nullptr};
};

inline std::shared_ptr<lt::DataLoader> loader(int64_t n = 8, int64_t batch = 2) {
  auto x = torch::randn({n, 2});
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, x.sum(1, true)),
                                          lt::DataLoaderOptions(batch));
}

}  // namespace lt::testing

// One type for every file's TEST_F(CallbacksTest, ...): gtest requires a test suite's tests to share their
// fixture class.
struct TempDirTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_callbacks_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  lt::TrainerOptions options(int64_t epochs) const {
    return lt::TrainerOptions().max_epochs(epochs).default_root_dir(dir_.string()).num_sanity_val_steps(0);
  }
  std::vector<std::string> files(const std::filesystem::path& d) const {
    std::vector<std::string> out;
    if (!std::filesystem::exists(d)) return out;
    for (const auto& e : std::filesystem::directory_iterator(d)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::filesystem::path dir_;
};

using CallbacksTest = TempDirTest;
