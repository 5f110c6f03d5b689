// Callbacks and loggers: EarlyStopping patience and thresholds, ModelCheckpoint
// top-k bookkeeping and file names, LearningRateMonitor, Timer, ProgressBar,
// LambdaCallback, CSVLogger, and how each behaves under Join.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/model_summary.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/loggers/console.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/seeding.h"

namespace fs = std::filesystem;

namespace {

// Logs a scripted val_loss per epoch (and trains a tiny linear layer).
class ScriptedModule : public lt::LightningModule {
 public:
  explicit ScriptedModule(std::vector<double> val_losses, bool with_scheduler = false)
      : val_losses_(std::move(val_losses)), with_scheduler_(with_scheduler) {
    fc_ = register_module("fc", torch::nn::Linear(2, 1));
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto loss = torch::mse_loss(fc_(b.data), b.target);
    log("train_loss", loss, lt::LogOptions().prog_bar(true));
    return loss;
  }
  void validation_step(const lt::Batch&, int64_t) override {
    const size_t e = static_cast<size_t>(current_epoch());
    log("val_loss", e < val_losses_.size() ? val_losses_[e] : val_losses_.back());
  }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    if (!with_scheduler_) return opt;
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.5), lt::Interval::kEpoch);
  }

 private:
  std::vector<double> val_losses_;
  bool with_scheduler_;
  torch::nn::Linear fc_{nullptr};
};

std::shared_ptr<lt::DataLoader> loader(int64_t n = 8, int64_t batch = 2) {
  auto x = torch::randn({n, 2});
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, x.sum(1, true)),
                                          lt::DataLoaderOptions(batch));
}

struct TempDirTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_callbacks_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  lt::TrainerOptions options(int64_t epochs) const {
    return lt::TrainerOptions().max_epochs(epochs).default_root_dir(dir_.string()).num_sanity_val_steps(0);
  }
  std::vector<std::string> files(const fs::path& d) const {
    std::vector<std::string> out;
    if (!fs::exists(d)) return out;
    for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

using CallbacksTest = TempDirTest;

// -- EarlyStopping ------------------------------------------------------------------------------

TEST_F(CallbacksTest, EarlyStoppingStopsAfterPatienceChecksWithoutImprovement) {
  // Best at epoch 1 (0.5); epochs 2, 3 do not improve; patience 2 stops after epoch 3.
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 0.5, 0.6, 0.55, 0.1, 0.1});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(2));
  lt::Trainer trainer(options(10).callbacks({es}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(trainer.current_epoch(), 4);  // epochs 0..3 ran
  EXPECT_EQ(es->wait_count(), 2);
  EXPECT_DOUBLE_EQ(es->best_score(), 0.5);
  EXPECT_NE(es->stopping_reason().find("did not improve in the last 2 records"), std::string::npos);
}

TEST_F(CallbacksTest, EarlyStoppingMinDeltaAndModeMax) {
  // Max mode: +0.05 is not an improvement with min_delta 0.1.
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{0.5, 0.55, 0.58, 0.9});
  auto es = std::make_shared<lt::EarlyStopping>(
      lt::EarlyStoppingOptions("val_loss").mode("max").min_delta(0.1).patience(2));
  lt::Trainer trainer(options(10).callbacks({es}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(es->stopped_epoch(), 2);
  EXPECT_DOUBLE_EQ(es->best_score(), 0.5);
}

TEST_F(CallbacksTest, EarlyStoppingThresholdAndNonFinite) {
  {
    auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 0.2, 0.01});
    auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").stopping_threshold(0.3));
    lt::Trainer trainer(options(10).callbacks({es}));
    trainer.fit(module, loader(), loader());
    EXPECT_EQ(es->stopped_epoch(), 1);
    EXPECT_NE(es->stopping_reason().find("stopping threshold reached"), std::string::npos);
  }
  {
    auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, NAN, 0.5});
    auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(100));
    lt::Trainer trainer(options(10).callbacks({es}));
    trainer.fit(module, loader(), loader());
    EXPECT_EQ(es->stopped_epoch(), 1);
    EXPECT_NE(es->stopping_reason().find("is not finite"), std::string::npos);
  }
}

TEST_F(CallbacksTest, EarlyStoppingMissingMetricIsAnError) {
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_acc"));
  lt::Trainer trainer(options(2).callbacks({es}));
  try {
    trainer.fit(module, loader(), loader());
    FAIL();
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "EarlyStopping: monitored metric 'val_acc' was not logged; available metrics: train_loss, val_loss. "
              "Log it with self.log, or pass strict=false");
  }
}

TEST_F(CallbacksTest, EarlyStoppingStateRoundTrips) {
  lt::EarlyStopping a(lt::EarlyStoppingOptions("val_loss").patience(5));
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 2.0, 3.0});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(5));
  lt::Trainer trainer(options(3).callbacks({es}));
  trainer.fit(module, loader(), loader());
  a.load_state_dict(es->state_dict());
  EXPECT_EQ(a.wait_count(), 2);
  EXPECT_DOUBLE_EQ(a.best_score(), 1.0);
  EXPECT_EQ(es->state_key(), "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}");
}

// -- ModelCheckpoint ------------------------------------------------------------------------------

TEST_F(CallbacksTest, ModelCheckpointKeepsTopKByMonitor) {
  // val_loss per epoch: 5, 3, 4, 1, 2  ->  top-2 (min): epochs 3 (1.0) and 4 (2.0).
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{5, 3, 4, 1, 2});
  const fs::path ckpt_dir = dir_ / "ckpts";
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                      .dirpath(ckpt_dir.string())
                                                      .monitor("val_loss")
                                                      .save_top_k(2)
                                                      .save_last(true)
                                                      .filename("{epoch}-{val_loss:.1f}"));
  lt::Trainer trainer(options(5).callbacks({mc}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(files(ckpt_dir),
            (std::vector<std::string>{"epoch=3-val_loss=1.0.ckpt", "epoch=4-val_loss=2.0.ckpt", "last.ckpt"}));
  const std::string best = (ckpt_dir / "epoch=3-val_loss=1.0.ckpt").string();
  const std::string kth = (ckpt_dir / "epoch=4-val_loss=2.0.ckpt").string();
  EXPECT_EQ(mc->best_model_path(), best);
  EXPECT_DOUBLE_EQ(*mc->best_model_score(), 1.0);
  EXPECT_EQ(mc->kth_best_model_path(), kth);
  EXPECT_EQ(mc->best_k_models(), (std::map<std::string, double>{{best, 1.0}, {kth, 2.0}}));
  EXPECT_EQ(mc->last_model_path(), (ckpt_dir / "last.ckpt").string());

  // The saved bookkeeping restores into a callback writing to the same folder.
  auto ckpt = lt::pickle_load_file(best).toGenericDict();
  auto states = ckpt.at("callbacks").toGenericDict();
  ASSERT_TRUE(states.contains(mc->state_key()));
  lt::ModelCheckpoint restored(lt::ModelCheckpointOptions().dirpath(ckpt_dir.string()).monitor("val_loss").save_top_k(2));
  restored.load_state_dict(states.at(mc->state_key()).toGenericDict());
  EXPECT_EQ(restored.best_model_path(), best);
  EXPECT_EQ(ckpt.at("epoch").toInt(), 3);  // Lightning's: written during epoch 3, at its end
  EXPECT_TRUE(ckpt.at("epoch_finished").toBool());
}

TEST_F(CallbacksTest, ModelCheckpointModeMaxAllAndNone) {
  const std::vector<double> values{1, 3, 2};
  {
    const fs::path d = dir_ / "max";
    auto mc = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(d.string()).monitor("val_loss").mode("max").save_top_k(1));
    lt::Trainer trainer(options(3).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), std::vector<std::string>{"epoch=1-step=8.ckpt"});
  }
  {
    const fs::path d = dir_ / "all";
    auto mc = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(d.string()).monitor("val_loss").save_top_k(-1));
    lt::Trainer trainer(options(3).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"}));
  }
  {
    const fs::path d = dir_ / "none";
    auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(d.string()).save_top_k(0));
    lt::Trainer trainer(options(2).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), std::vector<std::string>{});
  }
}

TEST_F(CallbacksTest, ModelCheckpointWithoutMonitorKeepsTheLatest) {
  auto mc = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer trainer(options(3).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  // Default folder, as Lightning's: the default logger's <default_root_dir>/lightning_logs/version_0/checkpoints.
  const fs::path folder = dir_ / "lightning_logs" / "version_0" / "checkpoints";
  EXPECT_EQ(files(folder), std::vector<std::string>{"epoch=2-step=12.ckpt"});
  EXPECT_EQ(mc->best_model_path(), (folder / "epoch=2-step=12.ckpt").string());
  // Without a logger (Lightning's logger=False): <default_root_dir>/checkpoints.
  auto alone = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer unlogged(options(3).callbacks({alone}).default_logger(false));
  unlogged.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(alone->best_model_path(), (dir_ / "checkpoints" / "epoch=2-step=12.ckpt").string());
}

TEST_F(CallbacksTest, ModelCheckpointEveryNTrainSteps) {
  const fs::path d = dir_ / "steps";
  auto mc = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath(d.string()).every_n_train_steps(3).save_top_k(-1));
  lt::Trainer trainer(options(2).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  // 4 steps per epoch: steps 3 and 6; no epoch-end saves (every_n_epochs defaults to 0 then).
  EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"}));
}

TEST_F(CallbacksTest, ModelCheckpointFileNames) {
  const std::map<std::string, double> m{{"epoch", 3}, {"step", 120}, {"val_loss", 0.4242}, {"val/acc", 0.5}};
  lt::ModelCheckpoint a(lt::ModelCheckpointOptions().filename("{epoch:02d}-{val_loss:.2f}"));
  EXPECT_EQ(a.format_checkpoint_name(m), "epoch=03-val_loss=0.42.ckpt");
  EXPECT_EQ(a.format_checkpoint_name(m, {}, 2), "epoch=03-val_loss=0.42-v2.ckpt");
  lt::ModelCheckpoint b(lt::ModelCheckpointOptions().filename("model-{epoch}-{val_loss}").auto_insert_metric_name(false));
  EXPECT_EQ(b.format_checkpoint_name(m), "model-3-0.4242.ckpt");
  lt::ModelCheckpoint c;
  EXPECT_EQ(c.format_checkpoint_name(m), "epoch=3-step=120.ckpt");
  EXPECT_EQ(c.format_checkpoint_name(m, "{missing:.3f}"), "missing=0.000.ckpt");
}

TEST_F(CallbacksTest, ModelCheckpointDoesNotOverwriteAnExistingFile) {
  const fs::path d = dir_ / "v";
  fs::create_directories(d);
  std::ofstream(d / "epoch=0-step=4.ckpt") << "someone else's";
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(d.string()).save_top_k(-1));
  lt::Trainer trainer(options(1).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=4-v1.ckpt", "epoch=0-step=4.ckpt"}));
}

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

// -- LearningRateMonitor, Timer, ProgressBar, LambdaCallback -----------------------------------------

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
TEST_F(CallbacksTest, TheTrainerAddsAProgressBarByDefault) {
  auto count = [](const lt::Trainer& trainer) {
    return std::count_if(trainer.callbacks().begin(), trainer.callbacks().end(),
                         [](const auto& c) { return c->name() == "ProgressBar"; });
  };
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions())), 1);
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions().enable_progress_bar(false))), 0);
  EXPECT_EQ(count(lt::Trainer(lt::TrainerOptions().callbacks({std::make_shared<lt::ProgressBar>()}))), 1);
}

// Lightning's table, character for character (computed with its
// _format_summary_table and get_human_readable_count): a frozen child, a
// child in eval mode, a parameter of the model itself.
TEST(ModelSummary, PrintsLightningsTable) {
  class Net : public lt::LightningModule {
   public:
    Net() {
      fc1 = register_module("fc1", torch::nn::Linear(4, 8));
      bn = register_module("bn", torch::nn::BatchNorm1d(8));
      head = register_module("head", torch::nn::Sequential(torch::nn::Linear(8, 2), torch::nn::ReLU()));
      register_parameter("scale", torch::ones({1}));
      for (auto& p : head->parameters()) p.set_requires_grad(false);
      bn->eval();
    }
    torch::Tensor training_step(const lt::Batch&, int64_t) override { return {}; }
    lt::OptimizerConfig configure_optimizers() override { return {}; }
    torch::nn::Linear fc1{nullptr};
    torch::nn::BatchNorm1d bn{nullptr};
    torch::nn::Sequential head{nullptr};
  };
  Net net;
  EXPECT_EQ(lt::summarize(net),
            "  | Name         | Type        | Params | Mode \n"
            "-----------------------------------------------------\n"
            "0 | fc1          | Linear      | 40     | train\n"
            "1 | bn           | BatchNorm1d | 16     | eval \n"
            "2 | head         | Sequential  | 18     | train\n"
            "  | other params | n/a         | 1      | n/a  \n"
            "-----------------------------------------------------\n"
            "57        Trainable params\n"
            "18        Non-trainable params\n"
            "75        Total params\n"
            "0.000     Total estimated model params size (MB)\n"
            "5         Modules in train mode\n"
            "1         Modules in eval mode");
  const std::string deep = lt::summarize(net, 2);
  EXPECT_NE(deep.find("3 | head.0       | Linear      | 18     | train\n4 | head.1       | ReLU        | 0      |"),
            std::string::npos)
      << deep;
  for (auto [n, text] : std::vector<std::pair<int64_t, std::string>>{{0, "0  "},
                                                                    {123, "123  "},
                                                                    {1234, "1.2 K"},
                                                                    {99999, "100.0 K"},
                                                                    {100000, "100 K"},
                                                                    {2000000, "2.0 M"},
                                                                    {3000000000, "3.0 B"},
                                                                    {400000000000000, "400 T"},
                                                                    {5000000000000000, "5,000 T"}}) {
    EXPECT_EQ(lt::human_readable_count(n), text) << n;
  }
  // On by default: printed once at the start of fit, on rank 0.
  std::vector<std::string> printed;
  lt::set_info_handler([&](const std::string& m) { printed.push_back(m); });
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).enable_progress_bar(false).logger(nullptr));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader());
  lt::set_info_handler(nullptr);
  EXPECT_EQ(std::count_if(printed.begin(), printed.end(),
                          [](const std::string& m) { return m.find("| Name | Type   | Params") != std::string::npos; }),
            1);
}

TEST_F(CallbacksTest, LambdaCallbackCallsItsFunctions) {
  auto cb = std::make_shared<lt::LambdaCallback>();
  int epochs = 0, batches = 0, saves = 0;
  cb->on_train_epoch_end_fn = [&](lt::Trainer&, lt::LightningModule&) { ++epochs; };
  cb->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const lt::Batch&, int64_t) {
    ++batches;
  };
  cb->on_save_checkpoint_fn = [&](lt::Trainer&, lt::LightningModule&, lt::StateDict& ckpt) {
    ++saves;
    ckpt.insert("extra", int64_t{42});
  };
  cb->on_fit_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { t.save_checkpoint((dir_ / "x.ckpt").string()); };
  cb->on_train_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { t.save_checkpoint((dir_ / "x.ckpt").string()); };
  lt::Trainer trainer(options(2).callbacks({cb}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(batches, 8);
  EXPECT_EQ(saves, 2);
  EXPECT_EQ(lt::pickle_load_file((dir_ / "x.ckpt").string()).toGenericDict().at("extra").toInt(), 42);
}

// -- loggers ------------------------------------------------------------------------------------

// Lightning's Trainer() logs to TensorBoard by default (logger=True); default_logger(false)
// is its logger=False, and fast_dev_run writes nothing.
// The default logger is the CLI's, CSV and TensorBoard, in one version folder
// (the collection fixes both versions before either writes).
TEST_F(CallbacksTest, TheTrainerLogsToCsvAndTensorBoardInOneFolderByDefault) {
  auto events = [](const fs::path& d) {
    std::vector<std::string> out;
    if (!fs::exists(d)) return out;
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
    }
    return out;
  };
  {
    lt::Trainer trainer(options(1));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
    EXPECT_EQ(trainer.log_dir(), (dir_ / "lightning_logs" / "version_0").string());
    EXPECT_EQ(events(dir_ / "lightning_logs" / "version_0").size(), 1u);
    EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "metrics.csv"));
  }
  {
    lt::Trainer trainer(options(1).default_logger(false));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
    EXPECT_EQ(trainer.log_dir(), dir_.string());
  }
  {
    lt::Trainer trainer(options(1).fast_dev_run(1));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  }
  EXPECT_EQ(files(dir_ / "lightning_logs"), std::vector<std::string>{"version_0"}) << "only the first run logged";
}

// As Lightning's _log_hyperparams: the DataModule's hparams are logged with
// the module's; a key both have with different values is an error naming it.
TEST_F(CallbacksTest, TheDataModulesHparamsAreLoggedWithTheModules) {
  class Data : public lt::DataModule {
   public:
    explicit Data(lt::HParams hparams) : hparams_(std::move(hparams)) {}
    std::shared_ptr<lt::DataLoader> train_dataloader() override { return loader(); }
    lt::HParams hparams() const override { return hparams_; }

   private:
    lt::HParams hparams_;
  };
  auto module = [] {
    auto m = std::make_shared<ScriptedModule>(std::vector<double>{1});
    m->hparams()["lr"] = 0.1;
    m->hparams()["batch_size"] = 2;
    return m;
  };
  auto csv = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  lt::Trainer trainer(options(1).logger(csv));
  trainer.fit(module(), std::make_shared<Data>(lt::HParams{{"batch_size", 2}, {"root", "/data"}}));
  EXPECT_EQ(lt::testing::read_file(fs::path(csv->log_dir()) / "hparams.yaml"), "batch_size: 2\nlr: 0.1\nroot: /data\n");
  lt::Trainer clash(options(1).logger(std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()))));
  try {
    clash.fit(module(), std::make_shared<Data>(lt::HParams{{"batch_size", 8}}));
    FAIL() << "a clash was accepted";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size (module 2, data module 8)"), std::string::npos) << e.what();
  }
}

TEST_F(CallbacksTest, CsvLoggerWritesLightningsLayout) {
  lt::CSVLogger logger(lt::CSVLoggerOptions(dir_.string()).flush_logs_every_n_steps(1));
  EXPECT_EQ(logger.log_dir(), (dir_ / "lightning_logs" / "version_0").string());
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs"));  // nothing before the first write
  logger.log_hyperparams({{"hidden", 128}, {"lr", 0.001}});
  logger.log_metrics({{"train_loss", 0.5}}, 0);
  logger.log_metrics({{"train_loss", 0.25}, {"val_loss", 0.75}}, 1);  // a new column: header rewritten
  logger.save();
  std::ifstream csv(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  std::stringstream ss;
  ss << csv.rdbuf();
  EXPECT_EQ(ss.str(), "step,train_loss,val_loss\n0,0.5,\n1,0.25,0.75\n");
  std::ifstream hp(dir_ / "lightning_logs" / "version_0" / "hparams.yaml");
  std::stringstream hs;
  hs << hp.rdbuf();
  EXPECT_EQ(hs.str(), "hidden: 128\nlr: 0.001\n");
  // The next logger takes the next version.
  lt::CSVLogger next(lt::CSVLoggerOptions(dir_.string()));
  EXPECT_EQ(next.version(), 1);
}

// As Lightning's logger connector: every row the Trainer logs carries the
// epoch it was logged in (an integer column), validation rows and a
// validate after the fit too.
TEST_F(CallbacksTest, MetricsCsvHasAnEpochColumn) {
  auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  lt::Trainer trainer(options(2).logger(logger).log_every_n_steps(2));
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{3, 2});
  trainer.fit(module, loader(), loader());  // 4 steps per epoch
  trainer.validate(module, loader());
  std::ifstream csv(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "epoch,step,train_loss,val_loss");
  // epoch, step and val_loss of each row (train_loss varies with the data).
  std::vector<std::string> rows;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    cells.resize(4);
    rows.push_back(cells[0] + "," + cells[1] + "," + cells[3]);
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"0,2,", "0,4,", "0,4,3.0", "1,6,", "1,8,", "1,8,2.0", "2,8,2.0"}));
}

// hparams.yaml as Lightning's loggers write it (PyYAML): read back by PyYAML,
// numbers are numbers (1e-7 exactly, not the string '1e-07'), bools are
// bools, and a string that looks like a number or a bool stays a string.
TEST_F(CallbacksTest, HparamsYamlKeepsTheirTypes) {
  lt::CSVLogger logger(lt::CSVLoggerOptions(dir_.string()));
  logger.log_hyperparams({{"lr", 1e-7},
                          {"third", 1.0 / 3.0},
                          {"tenth", 0.1},
                          {"whole", 256.0},
                          {"big", 1e16},
                          {"neg", -2.5},
                          {"inf", std::numeric_limits<double>::infinity()},
                          {"hidden", 256},
                          {"seed", int64_t{9007199254740993}},
                          {"amsgrad", true},
                          {"bias", false},
                          {"width", "8"},
                          {"flag", "true"},
                          {"yes", "yes"},
                          {"none", "null"},
                          {"exp", "1e-07"},
                          {"half", "-.5"},
                          {"name", "adam w"},
                          {"empty", ""},
                          {"colon", "a: b"}});
  const fs::path yaml = dir_ / "lightning_logs" / "version_0" / "hparams.yaml";
  // Each key's Python type and repr, as yaml.safe_load reads the file.
  const std::string cmd = "/usr/bin/python3 -c 'import sys, yaml\n"
                          "for k, v in sorted(yaml.safe_load(open(sys.argv[1])).items()): print(k, type(v).__name__, "
                          "repr(v))' " + yaml.string() + " 2>&1";
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << out << "(PyYAML: apt-get install python3-yaml)";
  EXPECT_EQ(out,
            "amsgrad bool True\n"
            "bias bool False\n"
            "big float 1e+16\n"
            "colon str 'a: b'\n"
            "empty str ''\n"
            "exp str '1e-07'\n"
            "flag str 'true'\n"
            "half str '-.5'\n"
            "hidden int 256\n"
            "inf float inf\n"
            "lr float 1e-07\n"
            "name str 'adam w'\n"
            "neg float -2.5\n"
            "none str 'null'\n"
            "seed int 9007199254740993\n"
            "tenth float 0.1\n"
            "third float 0.3333333333333333\n"
            "whole float 256.0\n"
            "width str '8'\n"
            "yes str 'yes'\n")
      << "hparams.yaml:\n"
      << std::string(std::istreambuf_iterator<char>(std::ifstream(yaml).rdbuf()), {});
}

TEST_F(CallbacksTest, TrainerWithCsvLoggerPutsCheckpointsBesideTheLogs) {
  auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  auto mc = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer trainer(options(1).callbacks({mc}).logger(logger).log_every_n_steps(1));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  const fs::path v0 = dir_ / "lightning_logs" / "version_0";
  EXPECT_TRUE(fs::exists(v0 / "metrics.csv"));
  EXPECT_EQ(files(v0 / "checkpoints"), std::vector<std::string>{"epoch=0-step=4.ckpt"});
}

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

namespace {

// Lightning's GradientAccumulationScheduler: {0: 1, 2: 2, 3: 4} steps every
// batch in epochs 0-1, every 2 in epoch 2, every 4 from epoch 3.
TEST_F(CallbacksTest, GradientAccumulationSchedulerSetsTheFactorByEpoch) {
  auto scheduler = std::make_shared<lt::GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{2, 2}, {3, 4}});
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(0), 1) << "epochs before the first key accumulate 1";
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(2), 2);
  EXPECT_EQ(scheduler->get_accumulate_grad_batches(7), 4);
  std::vector<int64_t> steps;
  auto record = std::make_shared<lt::LambdaCallback>();
  record->on_train_epoch_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { steps.push_back(t.global_step()); };
  lt::Trainer trainer(options(5).callbacks({scheduler, record}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader(16, 2));  // 8 batches
  EXPECT_EQ(steps, (std::vector<int64_t>{8, 16, 20, 22, 24}));
  // As Lightning: not with the Trainer's own accumulate_grad_batches, nor bad schedules.
  lt::Trainer both(options(1).accumulate_grad_batches(2).callbacks(
      {std::make_shared<lt::GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}})}));
  EXPECT_THROW(both.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader()), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler({}), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler(std::map<int64_t, int64_t>{{0, 0}}), lt::ValueError);
  EXPECT_THROW(lt::GradientAccumulationScheduler(std::map<int64_t, int64_t>{{-1, 2}}), lt::ValueError);
}

}  // namespace
