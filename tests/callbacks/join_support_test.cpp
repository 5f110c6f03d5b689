// How each callback behaves under Join (core/join_support.h): the
// compatibility, reason and fix each callback declares, and the monitors'
// priority.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <chrono>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST(JoinSupport, CallbacksDeclareTheirCompatibility) {
  const lt::TrainerOptions o;
  EXPECT_EQ(lt::EarlyStopping().join_support(o).compatibility, lt::JoinCompatibility::kCompatible);
  EXPECT_EQ(lt::ModelCheckpoint().join_support(o).compatibility, lt::JoinCompatibility::kCompatible);
  EXPECT_EQ(lt::ModelCheckpoint(lt::ModelCheckpointOptions().every_n_epochs(2)).join_support(o).compatibility,
            lt::JoinCompatibility::kCompatible);
  const auto steps = lt::ModelCheckpoint(lt::ModelCheckpointOptions().every_n_train_steps(10)).join_support(o);
  // A save after a step runs a barrier: a joined rank reaches it in lockstep Join only.
  EXPECT_EQ(steps.compatibility, lt::JoinCompatibility::kNeedsLockstep);
  EXPECT_NE(steps.reason.find("every_n_train_steps=10"), std::string::npos) << steps.reason;
  EXPECT_NE(steps.fix.find("every_n_epochs"), std::string::npos) << steps.fix;
  EXPECT_EQ(lt::LearningRateMonitor().join_support(o).compatibility, lt::JoinCompatibility::kCompatible);
  EXPECT_EQ(lt::Timer().join_support(o).compatibility, lt::JoinCompatibility::kCompatible);
  // A time limit checked every step issues a collective in a step hook: lockstep Join only.
  const auto timed = lt::Timer(lt::TimerOptions().duration(std::chrono::duration<double>(60.0))).join_support(o);
  EXPECT_EQ(timed.compatibility, lt::JoinCompatibility::kNeedsLockstep);
  EXPECT_NE(timed.fix.find("join_mode: lockstep"), std::string::npos) << timed.fix;
  EXPECT_EQ(lt::ProgressBar().join_support(o).compatibility, lt::JoinCompatibility::kCompatible);
  EXPECT_EQ(lt::EarlyStopping().priority(), lt::Callback::kMonitorPriority);
  EXPECT_EQ(lt::ModelCheckpoint().priority(), lt::Callback::kMonitorPriority);
}

}  // namespace
