// loggers/console.h: the ConsoleLogger refuses a level it does not know.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/loggers/console.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CallbacksTest, ConsoleLoggerRejectsBadLevel) {
  EXPECT_THROW(lt::ConsoleLogger(lt::ConsoleLoggerOptions().level("loud")), lt::ValueError);
  // A valid one writes its lines where it was told, at its precision.
  testing::internal::CaptureStderr();
  {
    lt::ConsoleLogger logger(lt::ConsoleLoggerOptions().stream("stderr").pattern("%v").precision(3));
    logger.log_metrics({{"a", 1.23456}, {"b", 2.0}}, 3);
    logger.finalize("success");
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "step 3: a=1.23, b=2\nrun success\n");
}

}  // namespace
