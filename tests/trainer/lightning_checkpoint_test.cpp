// Lightning 2.6 on the other side of our checkpoints (core/training_state.h),
// with the venv's pytorch-lightning (tests/python/lightning_checkpoint.py):
//   - Lightning's load_from_checkpoint builds the same model from ours (its
//     hyper-parameters and weights), and its Trainer resumes ours: at the
//     epoch, step and learning rate we stopped at, and one more epoch there
//     ends where ours ends (weights and Adam's state within 1e-5);
//   - we resume Lightning's (the Trainer; Fabric's load too), and one more
//     epoch here ends where Lightning's own uninterrupted run ends.
// The oracle is Lightning itself. Skipped where the Python of the LibTorch
// built against has no Lightning (Debian's 1.13: its unpickler cannot read
// Python's one-element lists either).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/dataset.h>
#include <lightning_cpp/fabric/fabric.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/checkpoint_fixture.h"
#include "support/command.h"

namespace fs = std::filesystem;

namespace {

// tests/python/lightning_checkpoint.py's LightningMlp.
class LightningMlp : public lt::LightningModule {
 public:
  explicit LightningMlp(int64_t hidden = 16, double lr = 0.01) : lr_(lr) {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 3));
    hparams()["hidden"] = hidden;
    hparams()["lr"] = lr;
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::cross_entropy_loss(fc2(torch::relu(fc1(batch.data))), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    auto adam = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr_));
    return lt::OptimizerConfig(adam, std::make_shared<lt::StepLR>(*adam, 1, 0.5), lt::Interval::kEpoch, 1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  double lr_;
};

std::shared_ptr<lt::DataLoader> data() {
  const int64_t n = 40;
  auto x = torch::sin(torch::arange(n * 4, torch::kFloat) * 0.37).reshape({n, 4});
  auto y = torch::arange(n, torch::kLong).remainder(3);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y), lt::DataLoaderOptions(8));
}

// Where the resumed run stands when training starts.
struct Start {
  int64_t epoch = -1, step = -1;
  double lr = 0;
};

// Fits to max_epochs (from `ckpt`), a checkpoint at each epoch's end in `dir`.
Start fit(const fs::path& dir, int64_t max_epochs, const std::string& ckpt = "") {
  Start start;
  auto report = std::make_shared<lt::LambdaCallback>();
  report->on_train_start_fn = [&](lt::Trainer& trainer, lt::LightningModule&) {
    start = {trainer.current_epoch(), trainer.global_step(),
             trainer.optimizer_config()->optimizer->param_groups()[0].options().get_lr()};
  };
  auto checkpoint =
      std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir.string()).save_top_k(-1));
  lt::Trainer trainer(lt::TrainerOptions()
                          .max_epochs(max_epochs)
                          .callbacks({checkpoint, report})
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .default_logger(false)
                          .default_root_dir(dir.string()));
  torch::manual_seed(0);
  trainer.fit(std::make_shared<LightningMlp>(), data(), nullptr, ckpt);
  return start;
}

// CheckpointTest's folder (support/checkpoint_fixture.h), skipped without Lightning.
class LightningCheckpoint : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    int code = 0;
    lt::testing::command_lines(c10::str(LT_PYTHON, " -c 'import pytorch_lightning'"), code);
    if (code != 0) GTEST_SKIP() << LT_PYTHON << " has no pytorch_lightning (the venv's has: scripts/install-deps.sh)";
  }
  // Runs tests/python/lightning_checkpoint.py; its lines, after checking its exit code.
  static std::vector<std::string> lightning(const std::string& args) {
    int code = 0;
    auto lines = lt::testing::command_lines(
        c10::str(LT_PYTHON, " -W ignore ", LT_SOURCE_DIR, "/tests/python/lightning_checkpoint.py ", args), code);
    std::string all;
    for (const auto& line : lines) all += line + "\n";
    EXPECT_EQ(code, 0) << all;
    return lines;
  }
  static bool has_line(const std::vector<std::string>& lines, const std::string& line) {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }
};

TEST_F(LightningCheckpoint, LightningLoadsAndResumesOurs) {
  const fs::path ours = dir_ / "ours", resumed = dir_ / "resumed", theirs = dir_ / "lightning";
  fit(ours, 1);
  const std::string epoch0 = (ours / "epoch=0-step=5.ckpt").string();
  ASSERT_TRUE(fs::exists(epoch0));
  const Start here = fit(resumed, 2, epoch0);
  EXPECT_EQ(here.epoch, 1);
  EXPECT_EQ(here.step, 5);
  EXPECT_DOUBLE_EQ(here.lr, 0.005);

  const auto lines = lightning(c10::str("fit ", theirs.string(), " 2 ", epoch0));
  EXPECT_TRUE(has_line(lines, "loaded hparams {'hidden': 16, 'lr': 0.01}"));
  EXPECT_TRUE(has_line(lines, "resumed epoch 1 step 5 lr 0.005"));
  EXPECT_TRUE(has_line(lines, "fit epoch 2 step 10"));
  lightning(c10::str("same ", (resumed / "epoch=1-step=10.ckpt").string(), " ",
                     (theirs / "epoch=1-step=10.ckpt").string(), " 1e-5"));
}

TEST_F(LightningCheckpoint, WeResumeLightnings) {
  const fs::path theirs = dir_ / "lightning", resumed = dir_ / "resumed";
  const auto lines = lightning(c10::str("fit ", theirs.string(), " 2"));
  EXPECT_TRUE(has_line(lines, "fit epoch 2 step 10"));
  const std::string epoch0 = (theirs / "epoch=0-step=5.ckpt").string();
  const Start here = fit(resumed, 2, epoch0);
  EXPECT_EQ(here.epoch, 1);
  EXPECT_EQ(here.step, 5);
  EXPECT_DOUBLE_EQ(here.lr, 0.005);
  lightning(c10::str("same ", (resumed / "epoch=1-step=10.ckpt").string(), " ",
                     (theirs / "epoch=1-step=10.ckpt").string(), " 1e-5"));

  // Fabric's load takes it too: the epoch to run, the step, the rate and the weights.
  lt::Fabric fabric(lt::FabricOptions().devices(1));
  fabric.launch([&](lt::Fabric& f) {
    auto model = std::make_shared<LightningMlp>();
    const lt::OptimizerConfig optim = f.setup(model);
    f.load(epoch0);
    EXPECT_EQ(f.current_epoch(), 1);
    EXPECT_EQ(f.global_step(), 5);
    EXPECT_DOUBLE_EQ(optim.optimizer->param_groups()[0].options().get_lr(), 0.005);
    const auto saved = lt::state_dict_from(lt::pickle_load_file(epoch0), epoch0);
    for (const auto& item : lt::module_state_dict(*model)) {
      EXPECT_TRUE(torch::equal(item.value(), saved.at(item.key()))) << item.key();
    }
  });
}

}  // namespace
