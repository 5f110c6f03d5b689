// callbacks/timer.h: the Timer stops fit when its duration is up, as
// Lightning's Timer.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <chrono>

#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CallbacksTest, TimerStopsFitWhenTimeIsUp) {
  auto timer = std::make_shared<lt::Timer>(
      lt::TimerOptions().duration(std::chrono::duration<double>(0.0)).verbose(false));
  lt::Trainer trainer(options(100).callbacks({timer}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(trainer.global_step(), 1);  // checked after the first step
  EXPECT_GT(timer->time_elapsed("train"), 0.0);
  EXPECT_EQ(lt::parse_duration("01:02:03:04").count(), 86400 + 2 * 3600 + 3 * 60 + 4);
  EXPECT_THROW(lt::parse_duration("1:x"), lt::ValueError);
  // Elapsed time survives a checkpoint.
  lt::Timer restored;
  restored.load_state_dict(timer->state_dict());
  EXPECT_DOUBLE_EQ(restored.time_elapsed("train"), timer->time_elapsed("train"));
}

}  // namespace
