#pragma once
// What the checkpoint_test binary's files share: the seeded fixture with a
// folder of its own and the Python of the LibTorch built against (the
// oracle: tests/python/checkpoint_interop.py and torch.load), the Reference
// model (the same layout as Reference in checkpoint_interop.py), its data,
// and the bitwise comparison of two models' weights.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/seeding.h"

namespace lt::testing {

inline constexpr const char* kPython = LT_PYTHON;  // the torch of the LibTorch built against

// Same layout as Reference in tests/python/checkpoint_interop.py.
class Reference : public lt::LightningModule {
 public:
  Reference() {
    encoder_ = register_module("encoder", torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                                                 torch::nn::ReLU()));
    head_ = register_module("head", torch::nn::Linear(8, 2));
    hparams()["width"] = 8;
    hparams()["lr"] = 0.01;
    hparams()["amsgrad"] = false;
    hparams()["name"] = "reference";
  }
  torch::Tensor forward(const torch::Tensor& x) { return head_(encoder_->forward(x)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto out = forward(torch::dropout(b.data, 0.2, is_training()));  // draws from the global generator
    auto loss = torch::mse_loss(out, b.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const lt::Batch& b, int64_t) override { log("val_loss", torch::mse_loss(forward(b.data), b.target)); }
  void test_step(const lt::Batch& b, int64_t) override { log("test_loss", torch::mse_loss(forward(b.data), b.target)); }
  torch::Tensor predict_step(const lt::Batch& b, int64_t) override { return forward(b.data); }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.7), lt::Interval::kEpoch);
  }

 private:
  torch::nn::Sequential encoder_{nullptr};
  torch::nn::Linear head_{nullptr};
};

inline std::shared_ptr<lt::DataLoader> data(bool shuffle) {
  auto gen = at::detail::createCPUGenerator(11);
  auto x = at::randn({48, 4}, gen, torch::kFloat);
  auto y = torch::stack({x.sum(1), x.select(1, 0) - x.select(1, 2)}, 1);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                          lt::DataLoaderOptions(8).shuffle(shuffle).seed(5));
}

inline void expect_same_weights(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto sa = lt::module_state_dict(a), sb = lt::module_state_dict(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& kv : sa) {
    ASSERT_TRUE(sb.contains(kv.key())) << kv.key();
    EXPECT_TRUE(torch::equal(kv.value(), sb.at(kv.key()))) << kv.key() << " differs by "
                                                           << (kv.value() - sb.at(kv.key())).abs().max().item<double>();
  }
}

}  // namespace lt::testing

// One type for every file's TEST_F(CheckpointTest, ...): gtest requires a test suite's tests to share
// their fixture class.
struct CheckpointTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_checkpoint_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static bool have_python_torch() {
    return std::system((std::string(lt::testing::kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
  }
  static int python(const std::string& args) {
    const std::string cmd = std::string(lt::testing::kPython) + " " + LT_SOURCE_DIR +
                            "/tests/python/checkpoint_interop.py " + args + " 2>&1";
    return std::system(cmd.c_str());
  }
  lt::TrainerOptions options(int64_t epochs) const {
    return lt::TrainerOptions().max_epochs(epochs).default_root_dir(dir_.string()).seed(0);
  }
  std::filesystem::path dir_;
};
