// callbacks/lr_monitor.h: LearningRateMonitor logs each epoch's learning
// rate and momentum under a StepLR, as Lightning's (the oracle: the rates the
// schedule gives).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

class RecordingLogger : public lt::Logger {
 public:
  std::string name() const override { return "recording"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows.emplace_back(step, metrics);
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

TEST_F(CallbacksTest, LearningRateMonitorLogsEachEpochsRate) {
  auto logger = std::make_shared<RecordingLogger>();
  auto lrm = std::make_shared<lt::LearningRateMonitor>(lt::LearningRateMonitorOptions().log_momentum(true));
  lt::Trainer trainer(options(3).callbacks({lrm}).logger(logger));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}, /*with_scheduler=*/true), loader(), loader());
  std::vector<double> lrs;
  for (const auto& [step, m] : logger->rows) {
    if (m.count("lr-SGD")) {
      lrs.push_back(m.at("lr-SGD"));
      EXPECT_DOUBLE_EQ(m.at("lr-SGD-momentum"), 0.9);
    }
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.05, 0.025}));
}

}  // namespace
