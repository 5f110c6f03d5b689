// dump_training_state (core/training_state.h): every entry of a checkpoint is
// assembled there, for the Trainer and Fabric alike; what only one driver has
// comes in as CheckpointExtras. One process, the base strategy.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/training_state.h>

namespace {

class Line : public lt::LightningModule {
 public:
  Line() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override { return torch::mse_loss(fc(b.data), b.target); }
  lt::OptimizerConfig configure_optimizers() override { return {}; }
  torch::nn::Linear fc{nullptr};
};

class BaseStrategy : public lt::Strategy {
 public:
  std::string name() const override { return "base"; }
};

struct Saving {
  Saving() {
    module.hparams()["lr"] = lt::HParam(0.1);
    module.hparams()["name"] = lt::HParam(std::string("line"));
    auto sgd = std::make_shared<torch::optim::SGD>(module.parameters(), torch::optim::SGDOptions(0.1));
    optim = lt::OptimizerConfig(sgd, std::make_shared<lt::StepLR>(*sgd, 1), lt::Interval::kEpoch, 1);
    optim.optimizers = {sgd};  // as the Trainer fills it in
    state.current_epoch = 2;
    state.global_step = 7;
    state.epoch_ended = true;
    state.stage = lt::Stage::kTrain;
  }
  lt::StateDict dump(const lt::CheckpointExtras& extras = {}) {
    lt::StateDict ckpt = lt::new_state_dict();
    lt::dump_training_state(ckpt, strategy, module, optim, state, extras);
    return ckpt;
  }
  Line module;
  BaseStrategy strategy;
  lt::OptimizerConfig optim;
  lt::RunState state;
};

std::vector<std::string> keys(const lt::StateDict& d) {
  std::vector<std::string> out;
  for (const auto& entry : d) out.push_back(entry.key().toStringRef());
  return out;
}

// Fabric's: no extras. Every key of the layout but the Trainer's own, with
// the module's hparams, and no pending scheduler step (the user steps it).
TEST(TrainingState, EveryEntryIsWrittenInOnePlaceForEitherDriver) {
  Saving run;
  const lt::StateDict ckpt = run.dump();
  EXPECT_EQ(keys(ckpt), (std::vector<std::string>{"state_dict", "epoch", "epoch_finished", "global_step",
                                                   "world_size", "optimizer", "lr_scheduler", "lightning_cpp_version",
                                                   "rng_states", "callbacks", "hparams",
                                                   "lr_scheduler_epoch_step_pending"}));
  const auto hparams = ckpt.at("hparams").toGenericDict();
  EXPECT_DOUBLE_EQ(hparams.at("lr").toDouble(), 0.1);
  EXPECT_EQ(hparams.at("name").toStringRef(), "line");
  EXPECT_TRUE(ckpt.at("callbacks").toGenericDict().empty());
  EXPECT_FALSE(ckpt.at("lr_scheduler_epoch_step_pending").toBool());
  EXPECT_EQ(ckpt.at("global_step").toInt(), 7);
}

// The Trainer's: its extras in their places, and at an epoch's end the fit
// loop's epoch scheduler step still to come.
TEST(TrainingState, TheTrainersExtrasAndThePendingSchedulerStep) {
  Saving run;
  lt::CheckpointExtras extras;
  extras.epoch_samples = lt::new_state_dict();
  extras.epoch_samples->insert("seen", int64_t{3});
  extras.callbacks = lt::new_state_dict();
  extras.callbacks->insert("EarlyStopping{}", lt::new_state_dict());
  extras.logger = lt::new_state_dict();
  extras.datamodule_hparams = lt::HParams{{"root", "/data"}};
  extras.steps_epoch_scheduler = true;
  const lt::StateDict ckpt = run.dump(extras);
  EXPECT_EQ(keys(ckpt), (std::vector<std::string>{"state_dict", "epoch", "epoch_finished", "global_step",
                                                   "world_size", "optimizer", "lr_scheduler", "lightning_cpp_version",
                                                   "rng_states", "epoch_samples", "callbacks", "logger", "hparams",
                                                   "datamodule_hparams", "lr_scheduler_epoch_step_pending"}));
  EXPECT_EQ(ckpt.at("datamodule_hparams").toGenericDict().at("root").toStringRef(), "/data");
  EXPECT_TRUE(ckpt.at("callbacks").toGenericDict().contains("EarlyStopping{}"));
  EXPECT_TRUE(ckpt.at("lr_scheduler_epoch_step_pending").toBool());
  // Mid-epoch: where the epoch is, and no step pending.
  run.state.epoch_ended = false;
  run.state.epoch_iteration = 4;
  const lt::StateDict mid = run.dump(extras);
  EXPECT_EQ(mid.at("epoch_iteration").toInt(), 4);
  EXPECT_FALSE(mid.at("lr_scheduler_epoch_step_pending").toBool());
}

}  // namespace
