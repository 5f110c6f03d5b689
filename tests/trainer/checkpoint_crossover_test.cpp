// Resuming a checkpoint of the other LibTorch (1.13 <-> 2.x), run by
// tests/compat/libtorch113.sh; the oracle is this build's uninterrupted run.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/version.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/checkpoint_fixture.h"

namespace fs = std::filesystem;

// -- a checkpoint of the other LibTorch (1.13 <-> 2.x) --------------------------------------------
// tests/compat/libtorch113.sh runs WriteForTheOtherLibTorch under both builds
// into one folder (LT_CROSS_DIR), then ResumeTheOtherLibTorchsCheckpoint under
// both: each resumes the other's mid-epoch checkpoint and must end where its
// own uninterrupted run ends. Weights and data come from formulas, not a
// generator, so both builds start alike; the first steps were the other
// LibTorch's arithmetic, so the weights agree to 1e-5, not bitwise (a resume
// that lost Adam's moments, the step or the scheduler lands 1e-3 away or more).
namespace {

class Formula : public lt::LightningModule {
 public:
  Formula() {
    fc1_ = register_module("fc1", torch::nn::Linear(4, 8));
    fc2_ = register_module("fc2", torch::nn::Linear(8, 2));
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) {
      p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat) * 0.37 + p.numel()).reshape(p.sizes()) * 0.3);
    }
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    return torch::mse_loss(fc2_(torch::tanh(fc1_(b.data))), b.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.7), lt::Interval::kEpoch);
  }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

std::shared_ptr<lt::DataLoader> formula_data() {
  auto x = torch::sin(torch::arange(48 * 4, torch::kFloat) * 0.11).reshape({48, 4});
  auto y = torch::stack({x.sum(1), x.select(1, 0) - x.select(1, 2)}, 1);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                          lt::DataLoaderOptions(8).shuffle(true).seed(5));
}

const std::string kThisLibTorch = "libtorch-" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                                  std::to_string(TORCH_VERSION_MINOR);

}  // namespace

TEST_F(CheckpointTest, WriteForTheOtherLibTorch) {
  const char* cross = std::getenv("LT_CROSS_DIR");
  if (cross == nullptr) GTEST_SKIP() << "run by tests/compat/libtorch113.sh (LT_CROSS_DIR)";
  auto every = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
      .dirpath((fs::path(cross) / kThisLibTorch).string()).every_n_train_steps(4).save_top_k(-1));
  lt::Trainer trainer(options(2).callbacks({every}).enable_progress_bar(false));
  trainer.fit(std::make_shared<Formula>(), formula_data());
  ASSERT_TRUE(fs::exists(fs::path(cross) / kThisLibTorch / "epoch=0-step=4.ckpt"));
}

TEST_F(CheckpointTest, ResumeTheOtherLibTorchsCheckpoint) {
  const char* cross = std::getenv("LT_CROSS_DIR");
  if (cross == nullptr) GTEST_SKIP() << "run by tests/compat/libtorch113.sh (LT_CROSS_DIR)";
  auto straight = std::make_shared<Formula>();
  lt::Trainer a(options(2).enable_progress_bar(false));
  a.fit(straight, formula_data());
  int resumed_count = 0;
  for (const auto& entry : fs::directory_iterator(cross)) {
    if (entry.path().filename() == kThisLibTorch) continue;
    const std::string path = (entry.path() / "epoch=0-step=4.ckpt").string();
    ASSERT_TRUE(fs::exists(path)) << path;
    auto resumed = std::make_shared<Formula>();
    lt::Trainer b(options(2).enable_progress_bar(false));
    b.fit(resumed, formula_data(), lt::FitOptions().ckpt_path(path));
    EXPECT_EQ(b.global_step(), a.global_step()) << path;
    auto sa = lt::module_state_dict(*straight), sb = lt::module_state_dict(*resumed);
    for (const auto& kv : sa) {
      const double diff = (kv.value() - sb.at(kv.key())).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << kThisLibTorch << " resuming " << path << ": " << kv.key();
    }
    ++resumed_count;
  }
  EXPECT_GE(resumed_count, 1) << "no checkpoint of another LibTorch in " << cross;
}
