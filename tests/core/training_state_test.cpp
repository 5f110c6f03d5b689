// dump_training_state (core/training_state.h): every entry of a checkpoint is
// assembled there, for the Trainer and Fabric alike; what only one driver has
// comes in as CheckpointExtras. One process, the base strategy.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/core/checkpoint_loops.h>
#include <lightning_cpp/core/lr_scheduler.h>
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

// Lightning 2.6's entries first, in its order, then ours.
const std::vector<std::string> kLightningKeys{"epoch",     "global_step",    "pytorch-lightning_version",
                                              "state_dict", "loops",          "callbacks",
                                              "optimizer_states", "lr_schedulers"};

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Fabric's: no extras. Every key of the layout but the Trainer's own, with
// the module's hparams, and no pending scheduler step (the user steps it).
TEST(TrainingState, EveryEntryIsWrittenInOnePlaceForEitherDriver) {
  Saving run;
  const lt::StateDict ckpt = run.dump();
  EXPECT_EQ(keys(ckpt), joined(kLightningKeys, {"hparams_name", "hyper_parameters", "epoch_finished", "world_size",
                                                "lightning_cpp_version", "rng_states",
                                                "lr_scheduler_epoch_step_pending"}));
  const auto hparams = ckpt.at("hyper_parameters").toGenericDict();
  EXPECT_DOUBLE_EQ(hparams.at("lr").toDouble(), 0.1);
  EXPECT_EQ(hparams.at("name").toStringRef(), "line");
  EXPECT_EQ(ckpt.at("hparams_name").toStringRef(), "kwargs");
  EXPECT_TRUE(ckpt.at("callbacks").toGenericDict().empty());
  EXPECT_EQ(ckpt.at("optimizer_states").toListRef().size(), 1u);
  EXPECT_EQ(ckpt.at("lr_schedulers").toListRef().size(), 1u);
  EXPECT_FALSE(ckpt.at("lr_scheduler_epoch_step_pending").toBool());
  EXPECT_EQ(ckpt.at("global_step").toInt(), 7);
}

// The Trainer's: its extras in their places, and at an epoch's end the fit
// loop's step of a scheduler that follows a metric still to come (one that
// follows none stepped after the epoch's last batch, as Lightning's).
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
  EXPECT_FALSE(run.dump(extras).at("lr_scheduler_epoch_step_pending").toBool());  // StepLR
  run.optim.lr_scheduler = std::make_shared<lt::ReduceLROnPlateau>(*run.optim.optimizer);
  const lt::StateDict ckpt = run.dump(extras);
  EXPECT_EQ(keys(ckpt), joined(kLightningKeys, {"hparams_name", "hyper_parameters", "datamodule_hyper_parameters",
                                                "epoch_finished", "world_size", "lightning_cpp_version",
                                                "rng_states", "epoch_samples", "logger",
                                                "lr_scheduler_epoch_step_pending"}));
  EXPECT_EQ(ckpt.at("datamodule_hyper_parameters").toGenericDict().at("root").toStringRef(), "/data");
  EXPECT_TRUE(ckpt.at("callbacks").toGenericDict().contains("EarlyStopping{}"));
  EXPECT_TRUE(ckpt.at("lr_scheduler_epoch_step_pending").toBool());
  // Mid-epoch: where the epoch is, and no step pending.
  run.state.epoch_ended = false;
  run.state.epoch_iteration = 4;
  const lt::StateDict mid = run.dump(extras);
  EXPECT_EQ(mid.at("epoch_iteration").toInt(), 4);
  EXPECT_FALSE(mid.at("lr_scheduler_epoch_step_pending").toBool());
}

// The loops' counters say where the run stood as Lightning's do at the same
// point, and read back to the same place: an epoch's end, mid-epoch, before an
// epoch. (Lightning itself resumes them: tests/trainer/lightning_checkpoint_test.cpp.)
TEST(TrainingState, LightningsLoopCountersReadBackToTheSamePlace) {
  struct Case {
    bool finished;
    int64_t iteration;
    int64_t epoch_to_run, resume_iteration;
  };
  for (const Case& c : {Case{true, 0, 3, 0}, Case{false, 4, 2, 4}, Case{false, 0, 2, 0}}) {
    lt::LoopsPosition at;
    at.current_epoch = 2;
    at.epoch_finished = c.finished;
    at.epoch_iteration = c.iteration;
    at.epoch_length = 6;
    at.global_step = 7;
    const lt::StateDict loops = lt::lightning_loops(at, /*automatic_optimization=*/true);
    const auto fit = loops.at("fit_loop").toGenericDict();
    const auto steps = fit.at("epoch_loop.automatic_optimization.optim_progress").toGenericDict().at("optimizer");
    EXPECT_EQ(steps.toGenericDict().at("step").toGenericDict().at("total").toGenericDict().at("completed").toInt(), 7);
    const lt::LoopsPosition back = lt::position_from_lightning_loops(loops, 7, "x.ckpt");
    EXPECT_EQ(back.current_epoch + (back.epoch_finished ? 1 : 0), c.epoch_to_run) << c.finished << c.iteration;
    EXPECT_EQ(back.epoch_iteration, c.resume_iteration) << c.finished << c.iteration;
  }
  lt::StateDict broken = lt::new_state_dict();
  broken.insert("fit_loop", lt::new_state_dict());
  try {
    lt::position_from_lightning_loops(broken, 0, "x.ckpt");
    FAIL() << "no error";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loops.fit_loop.epoch_progress is missing"), std::string::npos) << e.what();
  }
}

}  // namespace
