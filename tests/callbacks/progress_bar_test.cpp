// callbacks/progress_bar.h: plain lines without a terminal, never past the
// terminal's width, and one by default, as Lightning's TQDMProgressBar.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CallbacksTest, ProgressBarPrintsPlainLinesWithoutATerminal) {
  std::ostringstream plain, tty;
  auto a = std::make_shared<lt::ProgressBar>(lt::ProgressBarOptions().tty(false).stream(&plain));
  auto b = std::make_shared<lt::ProgressBar>(lt::ProgressBarOptions().tty(true).stream(&tty).width(200));
  lt::Trainer trainer(options(2).callbacks({a, b}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader(), loader());
  const std::string p = plain.str();
  EXPECT_EQ(p.find('\r'), std::string::npos) << p;
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 2) << p;
  EXPECT_EQ(p.rfind("Epoch 0/1: 4/4 batches [", 0), 0u) << p;
  EXPECT_NE(p.find("train_loss="), std::string::npos) << p;
  const std::string t = tty.str();
  EXPECT_NE(t.find('\r'), std::string::npos);
  EXPECT_NE(t.find("100%|####################| 4/4"), std::string::npos) << t;
  EXPECT_EQ(lt::ProgressBar::format_time(3725), "1:02:05");
  EXPECT_EQ(lt::ProgressBar::format_time(65), "01:05");
}

// Once validation metrics join the line it would pass the terminal's width
// and every redraw would scroll a new line: the bar narrows, then the line
// is cut, one column short of the edge.
TEST_F(CallbacksTest, ProgressBarNeverPassesTheTerminalWidth) {
  class ManyMetrics : public ScriptedModule {
   public:
    using ScriptedModule::ScriptedModule;
    void validation_step(const lt::Batch& b, int64_t i) override {
      ScriptedModule::validation_step(b, i);
      for (const char* name : {"val_accuracy_top1", "val_accuracy_top5", "val_cross_entropy"}) {
        log(name, torch::tensor(0.123456), lt::LogOptions().prog_bar(true));
      }
    }
  };
  for (const int64_t width : {60, 100}) {
    std::ostringstream tty;
    auto bar = std::make_shared<lt::ProgressBar>(lt::ProgressBarOptions().tty(true).stream(&tty).width(width));
    lt::Trainer trainer(options(3).callbacks({bar}));
    trainer.fit(std::make_shared<ManyMetrics>(std::vector<double>{0.5}), loader(), loader());
    size_t widest = 0, lines = 0;
    std::string line;
    for (const char c : tty.str()) {
      if (c == '\r' || c == '\n') {
        widest = std::max(widest, line.size());
        lines += !line.empty();
        line.clear();
      } else {
        line += c;
      }
    }
    EXPECT_GT(lines, 3u) << tty.str();
    EXPECT_EQ(widest, static_cast<size_t>(width - 1)) << tty.str();  // the metrics would reach further
  }
}

// Lightning's default: a progress bar unless one is given or it is turned off.
// After a mid-epoch resume the rate counts the batches this run trained, not
// the epoch's skipped ones: 2 batches of >= 100 ms each are at most 10 it/s
// (before: 8 batches over the same time, about 30 it/s).
TEST_F(CallbacksTest, ProgressBarRateCountsOnlyTheBatchesRunAfterAResume) {
  class Slow : public ScriptedModule {
   public:
    using ScriptedModule::ScriptedModule;
    torch::Tensor training_step(const lt::Batch& b, int64_t i) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return ScriptedModule::training_step(b, i);
    }
  };
  auto data = loader(16, 2);  // 8 batches
  const std::string ckpt_dir = (dir_ / "ckpts").string();
  lt::Trainer first(options(1).max_steps(6).enable_progress_bar(false).callbacks(
      {std::make_shared<lt::ModelCheckpoint>(
          lt::ModelCheckpointOptions().dirpath(ckpt_dir).filename("mid").every_n_train_steps(6))}));
  first.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), data);
  std::ostringstream plain;
  auto bar = std::make_shared<lt::ProgressBar>(lt::ProgressBarOptions().tty(false).stream(&plain));
  lt::Trainer resumed(options(1).callbacks({bar}));
  resumed.fit(std::make_shared<Slow>(std::vector<double>{0.5}), data, nullptr, ckpt_dir + "/mid.ckpt");
  const std::string line = plain.str();
  ASSERT_EQ(line.rfind("Epoch 0/0: 8/8 batches [", 0), 0u) << line;
  const size_t at = line.find("it/s");
  ASSERT_NE(at, std::string::npos) << line;
  const size_t from = line.rfind(' ', at) + 1;
  const double rate = std::stod(line.substr(from, at - from));
  EXPECT_GT(rate, 0.0) << line;
  EXPECT_LE(rate, 10.0) << line;
}

TEST_F(CallbacksTest, TheTrainerAddsAProgressBarByDefault) {
  auto count = [](const lt::Trainer& trainer) {
    return std::count_if(trainer.callbacks().begin(), trainer.callbacks().end(),
                         [](const auto& c) { return c->name() == "ProgressBar"; });
  };
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions())), 1);
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions().enable_progress_bar(false))), 0);
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions().callbacks({std::make_shared<lt::ProgressBar>()}))), 1);
}

}  // namespace
