// plugins/join/join_compatibility.h: the Join-compatibility check lists every
// incompatible feature with its reason and fix, takes declarations, built-in
// callbacks' answers and collective layers into account, and the strategy
// refuses the run on every rank before the first step (worker processes over Gloo).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

// -- The compatibility check ------------------------------------------------------------------

namespace {

// A third-party callback that declares its own answer.
class StepCollectiveCallback : public lt::Callback {
 public:
  std::string name() const override { return "StepCollectiveCallback"; }
  lt::JoinSupport join_support(const lt::TrainerOptions&) const override {
    return lt::JoinSupport::incompatible("it allreduces a metric in on_train_batch_end",
                                         "move the reduction to on_train_epoch_end");
  }
};

class QuietCallback : public lt::Callback {
 public:
  std::string name() const override { return "QuietCallback"; }
};

class ValNet : public JoinNet {
 public:
  bool has_validation_step() const override { return true; }
  void validation_step(const lt::Batch&, int64_t) override { ++validation_steps; }
  int64_t validation_steps = 0;
};

lt::FeatureSet features_of(const lt::TrainerOptions& options, const lt::LightningModule& module, bool validation,
                           bool scheduler_per_step) {
  lt::FeatureSet f;
  f.options = &options;
  f.module = &module;
  for (const auto& cb : options.callbacks()) f.callbacks.push_back(cb.get());
  f.has_validation = validation;
  f.scheduler_per_step = scheduler_per_step;
  return f;
}

}  // namespace

TEST(JoinCompatibility, ListsEveryIncompatibleFeatureWithItsReasonAndFix) {
  JoinNet module;
  module.set_automatic_optimization(false);
  module.collectives().in_forward = true;
  module.collectives().in_steps = true;
  auto options = lt::TrainerOptions()
                     .val_check_interval(0.5)
                     .callbacks({std::make_shared<StepCollectiveCallback>(), std::make_shared<QuietCallback>()});
  lt::JoinSettings pytorch_mode;
  pytorch_mode.mode = lt::JoinMode::kPyTorch;
  const auto report = lt::check_join_compatibility(features_of(options, module, true, true), pytorch_mode);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.with(lt::JoinCompatibility::kIncompatible).size(), 5u);
  const std::string message = report.refusal_message();
  for (const char* expected :
       {"5 features are incompatible", "1. callback StepCollectiveCallback: it allreduces a metric",
        "Fix: move the reduction to on_train_epoch_end", "val_check_interval=0.5", "set val_check_interval: 1.0",
        "manual optimization", "manual_declared = true", "collectives in forward", "user collectives in steps",
        "join_throw_on_early_termination: true"}) {
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\n" << message;
  }
  EXPECT_EQ(message.find("QuietCallback"), std::string::npos) << message;
  ASSERT_EQ(report.warnings().size(), 1u);
  EXPECT_NE(report.warnings()[0].find("per-step LR scheduler"), std::string::npos);
  // Lockstep (the default): a joined rank steps its scheduler with the others, so no warning.
  const auto lockstep = lt::check_join_compatibility(features_of(options, module, true, true), lt::JoinSettings{});
  EXPECT_EQ(lockstep.with(lt::JoinCompatibility::kIncompatible).size(), 5u);
  EXPECT_TRUE(lockstep.warnings().empty()) << lockstep.warnings().front();
}

TEST(JoinCompatibility, ThrowOnEarlyTerminationAndDeclarationsMakeACompatibleSet) {
  JoinNet module;
  module.set_automatic_optimization(false);
  module.collectives().manual_declared = true;
  module.collectives().in_forward = true;
  module.collectives().in_steps = true;
  auto options = lt::TrainerOptions().val_check_interval(1.0).callbacks({std::make_shared<QuietCallback>()});
  lt::JoinSettings settings;
  settings.throw_on_early_termination = true;
  const auto report = lt::check_join_compatibility(features_of(options, module, true, false), settings);
  EXPECT_TRUE(report.ok()) << report.refusal_message();
  EXPECT_EQ(report.with(lt::JoinCompatibility::kNeedsShadowing).size(), 1u);  // sync_dist logging
  // An integer val_check_interval validates mid-epoch.
  options.val_check_interval(3);
  EXPECT_FALSE(lt::check_join_compatibility(features_of(options, module, true, false), settings).ok());
  EXPECT_TRUE(lt::check_join_compatibility(features_of(options, module, false, false), settings).ok());
}

TEST(JoinCompatibility, BuiltInCallbacksDeclareTheirAnswer) {
  JoinNet module;
  auto options = lt::TrainerOptions().callbacks(
      {std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("train_loss")),
       std::make_shared<lt::ModelCheckpoint>(), std::make_shared<lt::ModelCheckpoint>(
                                                    lt::ModelCheckpointOptions().every_n_train_steps(5))});
  // Lockstep (the default): a joined rank reaches every step's save, so nothing is refused.
  const auto lockstep = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  EXPECT_TRUE(lockstep.ok()) << lockstep.refusal_message();
  lt::JoinSettings pytorch_mode;
  pytorch_mode.mode = lt::JoinMode::kPyTorch;
  const auto report = lt::check_join_compatibility(features_of(options, module, false, false), pytorch_mode);
  const auto refused = report.with(lt::JoinCompatibility::kIncompatible);
  ASSERT_EQ(refused.size(), 1u) << report.refusal_message();
  EXPECT_NE(report.refusal_message().find("every_n_train_steps=5"), std::string::npos) << report.refusal_message();
  EXPECT_NE(report.refusal_message().find("every_n_epochs"), std::string::npos) << report.refusal_message();
  // Manual optimization: a joined rank takes no step, lockstep or not.
  module.set_automatic_optimization(false);
  module.collectives().manual_declared = true;
  const auto manual = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  ASSERT_EQ(manual.with(lt::JoinCompatibility::kIncompatible).size(), 1u) << manual.refusal_message();
  EXPECT_NE(manual.refusal_message().find("lockstep needs automatic optimization"), std::string::npos)
      << manual.refusal_message();
}

TEST(JoinCompatibility, CollectiveLayersAreShadowedNotRefused) {
  SyncNet module;
  const auto options = lt::TrainerOptions();
  const auto report = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  EXPECT_TRUE(report.ok()) << report.refusal_message();
  bool listed = false;
  for (const auto* f : report.with(lt::JoinCompatibility::kNeedsShadowing)) {
    listed = listed || f->name == "collective layers (1, e.g. lt::SyncBatchNorm)";
  }
  EXPECT_TRUE(listed);
  // Collectives in forward that no layer shadows are still refused, with the way out.
  module.collectives().in_forward = true;
  const auto refused = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.refusal_message().find("lt::CollectiveLayer"), std::string::npos) << refused.refusal_message();
}

LT_TEST_WORKER(JoinRefusedBeforeTheFirstStep) {
  const int rank = env_int("RANK");
  auto model = std::make_shared<ValNet>();
  model->collectives().in_forward = true;
  auto options = base_options(make_strategy(), 2)
                     .val_check_interval(0.25)
                     .callbacks({std::make_shared<StepCollectiveCallback>()});
  lt::Trainer trainer(options);
  try {
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5), rank_loader(rank, 1));
  } catch (const lt::JoinCompatibilityError& e) {
    const std::string what = e.what();
    // Mid-epoch validation (val_check_interval 0.25) works in lockstep Join: not among them.
    LT_WORKER_CHECK(what.find("2 features are incompatible") != std::string::npos, what);
    LT_WORKER_CHECK(what.find("val_check_interval") == std::string::npos, what);
    LT_WORKER_CHECK(model->training_steps == 0);
    // The same process group then trains a compatible set.
    auto ok_model = std::make_shared<ValNet>();
    lt::Trainer ok_trainer(base_options(make_strategy(), 2).val_check_interval(1.0));
    ok_trainer.fit(ok_model, rank_loader(rank, rank == 0 ? 3 : 5), rank_loader(rank, 1));
    LT_WORKER_CHECK(ok_model->training_steps == (rank == 0 ? 3 : 5));
    // Even shards (4 batches each): nobody joins early, so the same features are not refused;
    // validation runs after every batch (val_check_interval 0.25).
    auto even_model = std::make_shared<ValNet>();
    even_model->collectives().in_forward = true;
    lt::Trainer even_trainer(options);
    even_trainer.fit(even_model, rank_loader(rank, 4), rank_loader(rank, 1));
    LT_WORKER_CHECK(even_model->training_steps == 4 && even_model->validation_steps == 4,
                    even_model->training_steps, " steps, ", even_model->validation_steps, " validation steps");
    return 0;
  }
  LT_WORKER_CHECK(false, "fit was not refused");
  return 1;
}

TEST(JoinCompatibility, TheStrategyRefusesTheRunOnEveryRankBeforeTheFirstStep) {
  expect_workers_pass("JoinRefusedBeforeTheFirstStep", 2, std::chrono::seconds(60));
}
