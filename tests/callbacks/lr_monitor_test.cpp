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

// ReduceLROnPlateau in a fit: stepped at each epoch's end with the monitored
// val_loss (1.0, 0.5, then no better), it halves the rate after two epochs
// without improvement (patience 1), as PyTorch's; LearningRateMonitor shows it.
TEST_F(CallbacksTest, ReduceLROnPlateauFollowsTheMonitoredMetric) {
  class Plateau : public ScriptedModule {
   public:
    Plateau(std::string monitor, bool strict)
        : ScriptedModule({1.0, 0.5, 0.5, 0.5, 0.5, 0.5}), monitor_(std::move(monitor)), strict_(strict) {}
    lt::OptimizerConfig configure_optimizers() override {
      auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      lt::OptimizerConfig config(opt, std::make_shared<lt::ReduceLROnPlateau>(
                                          *opt, lt::ReduceLROnPlateauOptions().factor(0.5).patience(1)));
      config.monitor = monitor_;
      config.strict = strict_;
      return config;
    }
    std::string monitor_;
    bool strict_;
  };
  auto logger = std::make_shared<RecordingLogger>();
  lt::Trainer trainer(options(6).callbacks({std::make_shared<lt::LearningRateMonitor>()}).logger(logger));
  trainer.fit(std::make_shared<Plateau>("val_loss", true), loader(), loader());
  std::vector<double> lrs;
  for (const auto& [step, m] : logger->rows) {
    if (m.count("lr-SGD")) lrs.push_back(m.at("lr-SGD"));
  }
  // Epoch ends: 1.0 best, 0.5 best, bad 1, bad 2 (> patience: halved), bad 1, bad 2 (halved).
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.05, 0.05})) << lrs.size();
  // A metric that is never logged: an error naming what is, unless strict is false.
  lt::Trainer missing(options(1));
  try {
    missing.fit(std::make_shared<Plateau>("val_acc", true), loader(), loader());
    FAIL() << "a missing monitored metric must stop the run";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("follows 'val_acc', which is not among the logged metrics ("),
              std::string::npos) << e.what();
  }
  lt::Trainer lenient(options(1));
  EXPECT_NO_THROW(lenient.fit(std::make_shared<Plateau>("val_acc", false), loader(), loader()));
  // No monitor at all: refused before the first step.
  lt::Trainer unmonitored(options(1));
  EXPECT_THROW(unmonitored.fit(std::make_shared<Plateau>("", true), loader(), loader()), lt::ValueError);
}

}  // namespace
