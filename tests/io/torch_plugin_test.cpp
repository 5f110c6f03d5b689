// plugins/io/torch_plugin.h and core/checkpoint_plugin.h: TorchCheckpointIO
// saves, loads and removes checkpoints; a strategy saves, loads and removes
// through the CheckpointIO it owns, which the Trainer gives it unless it has one.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_plugin.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/strategies/single_device.h>
#include <lightning_cpp/trainer/trainer.h>

#include "io/io_fixture.h"

namespace fs = std::filesystem;

namespace {

using TorchCheckpointIOTest = lt::testing::IoTest;

// Records what the strategy asks of it.
class RecordingCheckpointIO : public lt::CheckpointIO {
 public:
  void save_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                       const lt::DeferredValues& /*deferred*/) override {
    saved.push_back(path);
    last = checkpoint;
  }
  c10::IValue load_checkpoint(const std::string& path, bool /*placeholders*/) override {
    loaded.push_back(path);
    return last;
  }
  void remove_checkpoint(const std::string& path) override { removed.push_back(path); }

  std::vector<std::string> saved, loaded, removed;
  c10::IValue last;
};

TEST_F(TorchCheckpointIOTest, LoadsWhatItSaved) {
  lt::TorchCheckpointIO io;
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("w", torch::randn({3, 4}));
  checkpoint.insert("epoch", int64_t{2});
  const std::string file = path("a.ckpt");
  io.save_checkpoint(checkpoint, file);
  const auto loaded = io.load_checkpoint(file).toGenericDict();
  EXPECT_TRUE(loaded.at("w").toTensor().equal(checkpoint.at("w").toTensor()));
  EXPECT_EQ(loaded.at("epoch").toInt(), 2);
}

TEST_F(TorchCheckpointIOTest, RemovesAFileAFolderAndNothingQuietly) {
  lt::TorchCheckpointIO io;
  io.save_checkpoint(c10::IValue(int64_t{1}), path("a.ckpt"));
  fs::create_directories(dir_ / "sharded.ckpt");
  write_bytes(path("sharded.ckpt/meta.pt"), "x");
  io.remove_checkpoint(path("a.ckpt"));
  io.remove_checkpoint(path("sharded.ckpt"));
  EXPECT_NO_THROW(io.remove_checkpoint(path("never.ckpt")));
  EXPECT_FALSE(fs::exists(dir_ / "a.ckpt"));
  EXPECT_FALSE(fs::exists(dir_ / "sharded.ckpt"));
}

TEST_F(TorchCheckpointIOTest, LoadWeightsTakesACheckpointOrABareStateDict) {
  torch::nn::Linear source(3, 2), target(3, 2);
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("state_dict", lt::module_state_dict(*source));
  checkpoint.insert("epoch", int64_t{0});
  lt::atomic_pickle_save(checkpoint, path("full.ckpt"));
  lt::load_weights(*target, path("full.ckpt"));
  EXPECT_TRUE(target->weight.equal(source->weight));
  torch::nn::Linear bare_target(3, 2);
  lt::atomic_pickle_save(lt::module_state_dict(*source), path("bare.pt"));
  lt::load_weights(*bare_target, path("bare.pt"));
  EXPECT_TRUE(bare_target->bias.equal(source->bias));
}

TEST_F(TorchCheckpointIOTest, AStrategySavesLoadsAndRemovesThroughItsCheckpointIO) {
  lt::SingleDeviceStrategy strategy;
  auto io = std::make_shared<RecordingCheckpointIO>();
  strategy.set_checkpoint_io(io);
  ASSERT_TRUE(strategy.has_checkpoint_io());
  EXPECT_EQ(&strategy.checkpoint_io(), io.get());
  strategy.save_checkpoint(c10::IValue(int64_t{5}), path("x.ckpt"));
  EXPECT_EQ(strategy.load_checkpoint(path("x.ckpt")).toInt(), 5);
  strategy.remove_checkpoint(path("x.ckpt"));
  EXPECT_EQ(io->saved, std::vector<std::string>{path("x.ckpt")});
  EXPECT_EQ(io->loaded, std::vector<std::string>{path("x.ckpt")});
  EXPECT_EQ(io->removed, std::vector<std::string>{path("x.ckpt")});
  EXPECT_FALSE(fs::exists(dir_ / "x.ckpt"));  // the strategy wrote nothing itself
}

TEST_F(TorchCheckpointIOTest, AStrategyWithoutOneSaysHowToGiveIt) {
  lt::SingleDeviceStrategy strategy;
  EXPECT_FALSE(strategy.has_checkpoint_io());
  try {
    strategy.save_checkpoint(c10::IValue(int64_t{5}), path("x.ckpt"));
    ADD_FAILURE() << "a strategy without a CheckpointIO saved";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("set_checkpoint_io"), std::string::npos) << e.what();
  }
  EXPECT_THROW(strategy.set_checkpoint_io(nullptr), lt::Error);
}

TEST_F(TorchCheckpointIOTest, TheTrainerGivesTorchCheckpointIOAndKeepsAnother) {
  auto plain = std::make_shared<lt::SingleDeviceStrategy>();
  lt::Trainer trainer(lt::TrainerOptions().strategy(plain).default_logger(false).default_root_dir(dir_.string()));
  ASSERT_TRUE(plain->has_checkpoint_io());
  EXPECT_NE(dynamic_cast<lt::TorchCheckpointIO*>(&plain->checkpoint_io()), nullptr);

  auto given = std::make_shared<lt::SingleDeviceStrategy>();
  auto io = std::make_shared<RecordingCheckpointIO>();
  given->set_checkpoint_io(io);
  lt::Trainer other(lt::TrainerOptions().strategy(given).default_logger(false).default_root_dir(dir_.string()));
  EXPECT_EQ(&given->checkpoint_io(), io.get());
}

// validate, test and predict with a ckpt_path read the weights through the
// strategy's CheckpointIO (a format of one's own), into the module through
// the strategy (a sharded one's load_module_state).
TEST_F(TorchCheckpointIOTest, ValidateTestAndPredictReadTheWeightsThroughIt) {
  class Probe : public lt::LightningModule {
   public:
    Probe() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
    torch::Tensor training_step(const lt::Batch& b, int64_t) override { return fc(b.data).sum(); }
    void validation_step(const lt::Batch& b, int64_t) override { log("out", fc(b.data).sum()); }
    void test_step(const lt::Batch& b, int64_t) override { log("out", fc(b.data).sum()); }
    torch::Tensor predict_step(const lt::Batch& b, int64_t) override { return fc(b.data); }
    lt::OptimizerConfig configure_optimizers() override { return {}; }
    torch::nn::Linear fc{nullptr};
  };
  Probe source;
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("state_dict", lt::module_state_dict(source));
  auto strategy = std::make_shared<lt::SingleDeviceStrategy>();
  auto io = std::make_shared<RecordingCheckpointIO>();
  io->last = checkpoint;  // what it "stored" under any path; no file is written or read
  strategy->set_checkpoint_io(io);
  lt::Trainer trainer(lt::TrainerOptions().strategy(strategy).default_logger(false).enable_progress_bar(false)
                          .enable_model_summary(false).default_root_dir(dir_.string()));
  auto loader = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::ones({2, 2}), torch::zeros({2, 1})), lt::DataLoaderOptions(2));
  auto model = std::make_shared<Probe>();
  trainer.validate(model, loader, path("weights.ckpt"));
  EXPECT_TRUE(model->fc->weight.equal(source.fc->weight));
  EXPECT_TRUE(model->fc->bias.equal(source.fc->bias));
  trainer.test(std::make_shared<Probe>(), loader, path("weights.ckpt"));
  trainer.predict(std::make_shared<Probe>(), loader, path("weights.ckpt"));
  EXPECT_EQ(io->loaded, std::vector<std::string>(3, path("weights.ckpt")));
  EXPECT_FALSE(fs::exists(dir_ / "weights.ckpt"));
}

}  // namespace
