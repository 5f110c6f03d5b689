// core/signals.h through the Trainer: SIGINT/SIGTERM stop at the next step
// boundary and checkpoint; a second signal exits at once without one.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/reliability_fixture.h"

using namespace lt::testing::reliability;  // TempDir, Tiny, start_worker, contains (reliability_fixture.h)

namespace {

// -- SIGINT/SIGTERM: stop at the next step boundary, checkpoint, exit -----------

class RaiseSignalAt : public lt::Callback {
 public:
  RaiseSignalAt(int64_t batch, int times) : batch_(batch), times_(times) {}
  std::string name() const override { return "raise_signal"; }
  void on_before_backward(lt::Trainer&, lt::LightningModule&, const torch::Tensor&) override {
    if (++calls_ == batch_ + 1) {
      for (int i = 0; i < times_; ++i) raise(SIGTERM);
    }
  }
  void on_exception(lt::Trainer&, lt::LightningModule&, const std::exception& e) override { exception = e.what(); }
  int64_t batch_;
  int times_;
  int64_t calls_ = 0;
  std::string exception;
};

TEST(Signals, SigtermStopsAtTheStepBoundaryAndCheckpoints) {
  TempDir dir;
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({40, 2}), torch::randn({40, 1})), lt::DataLoaderOptions(4));
  auto signal_cb = std::make_shared<RaiseSignalAt>(/*batch=*/4, /*times=*/1);
  // accumulate 2: the signal arrives in batch 4 (window [4, 6)), the run stops after batch 5's step.
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(2).default_root_dir(
      dir.path.string()).callbacks({signal_cb}));
  torch::manual_seed(0);
  try {
    trainer.fit(std::make_shared<Tiny>(), data);
    FAIL() << "expected lt::Interrupted";
  } catch (const lt::Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    // Where the run is and how to resume it: a stop on request, not a failure. The checkpoint is
    // in the run's version folder, with its logs.
    const std::string ckpt =
        (fs::absolute(dir.path) / "lightning_logs" / "version_0" / "interrupted.ckpt").lexically_normal().string();
    EXPECT_EQ(e.checkpoint(), ckpt);
    EXPECT_EQ(trainer.interrupted_checkpoint_path(), ckpt);
    EXPECT_EQ(std::string(e.what()), "training interrupted by signal 15 at epoch 0, global step 3; stopped on request: " +
                                         ckpt + " holds the run; resume it with ckpt_path=" + ckpt);
    // What a program that prints its own resume command (lightning-cpp's CLI) prints before it.
    EXPECT_EQ(e.without_resume_hint(),
              "training interrupted by signal 15 at epoch 0, global step 3; stopped on request: " + ckpt + " holds the run");
  }
  EXPECT_EQ(signal_cb->exception, "training interrupted by signal 15 at epoch 0, global step 3");
  const fs::path interrupted = dir.path / "lightning_logs" / "version_0" / "interrupted.ckpt";
  auto ckpt = lt::pickle_load_file(interrupted.string()).toGenericDict();
  EXPECT_EQ(ckpt.at("global_step").toInt(), 3);
  EXPECT_EQ(ckpt.at("epoch").toInt(), 0);
  EXPECT_EQ(ckpt.at("epoch_iteration").toInt(), 6);  // mid-epoch: batches [0, 6) of 10 are done
  // Resumed from it, the run ends with the weights of one never interrupted.
  auto run = [&](int seed, const std::string& ckpt_path) {
    torch::manual_seed(seed);
    auto model = std::make_shared<Tiny>();
    lt::Trainer t(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(2).default_root_dir(dir.path.string()));
    t.fit(model, data, nullptr, ckpt_path);
    EXPECT_EQ(t.global_step(), 15);
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto straight = run(0, "");
  const auto resumed = run(7, interrupted.string());
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(straight[i].equal(resumed[i])) << "parameter " << i;
  // The handlers are gone after fit: the default action is back.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

// -- Resuming as a user means it: `last` is the newest, one version folder ------------

// Logs its loss every step (metrics.csv) and records the step each fit starts at.
class LoggingTiny : public Tiny {
 public:
  torch::Tensor training_step(const lt::Batch& b, int64_t i) override {
    torch::Tensor loss = Tiny::training_step(b, i);
    log("train_loss", loss);
    return loss;
  }
  void on_train_start() override { first_step = global_step(); }
  int64_t first_step = -1;
};

// A fit of 3 epochs of 10 steps in `dir`, saving last.ckpt at each epoch's end,
// stopped by a SIGTERM in step 15 (of 30) when `stop`, resumed from `ckpt_path`.
struct ResumeRun {
  std::shared_ptr<LoggingTiny> model;
  std::string interrupted;  // the checkpoint the stop names
};
ResumeRun fit_three_epochs(const fs::path& dir, bool stop, const std::string& ckpt_path = {}) {
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::linspace(-1, 1, 80).reshape({40, 2}),
                                          torch::linspace(0, 1, 40).reshape({40, 1})),
      lt::DataLoaderOptions(4));
  std::vector<std::shared_ptr<lt::Callback>> callbacks{
      std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().save_last(true))};
  if (stop) callbacks.push_back(std::make_shared<RaiseSignalAt>(/*batch=*/14, /*times=*/1));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).log_every_n_steps(1).default_root_dir(dir.string())
                          .callbacks(callbacks).enable_progress_bar(false).enable_model_summary(false));
  torch::manual_seed(0);
  ResumeRun run{std::make_shared<LoggingTiny>(), {}};
  try {
    trainer.fit(run.model, data, nullptr, ckpt_path);
  } catch (const lt::Interrupted& e) {
    run.interrupted = e.checkpoint();
  }
  return run;
}

// Stopped at step 15 and resumed: from step 15, in the stopped run's version
// folder, its metrics.csv each step once, as the uninterrupted run's.
void expect_one_history(const fs::path& dir, const ResumeRun& resumed, const std::string& straight_metrics) {
  const fs::path version = dir / "lightning_logs" / "version_0";
  EXPECT_EQ(resumed.model->first_step, 15);
  EXPECT_TRUE(resumed.interrupted.empty()) << "stopped again: " << resumed.interrupted;
  EXPECT_FALSE(fs::exists(dir / "lightning_logs" / "version_1")) << "the resumed run started a new version folder";
  EXPECT_FALSE(straight_metrics.empty());
  EXPECT_EQ(lt::testing::read_file((version / "metrics.csv").string()), straight_metrics);
}

// Before: `last` took the epoch's last.ckpt (step 10) over the newer
// interrupted.ckpt (step 15), and a resume from the path the stop printed
// logged to a new version_1, the run's history split in two.
TEST(Resume, LastIsTheNewestCheckpointAndAResumedRunGoesOnInItsVersionFolder) {
  TempDir straight_dir, by_last_dir, by_path_dir;
  fit_three_epochs(straight_dir.path, false);
  const std::string straight =
      lt::testing::read_file((straight_dir.path / "lightning_logs" / "version_0" / "metrics.csv").string());
  for (const fs::path& dir : {by_last_dir.path, by_path_dir.path}) {
    const fs::path version = dir / "lightning_logs" / "version_0";
    const ResumeRun stopped = fit_three_epochs(dir, true);
    ASSERT_EQ(stopped.interrupted, fs::absolute(version / "interrupted.ckpt").lexically_normal().string());
    ASSERT_TRUE(fs::exists(version / "checkpoints" / "last.ckpt"));  // step 10's, older
    const bool by_last = dir == by_last_dir.path;
    expect_one_history(dir, fit_three_epochs(dir, false, by_last ? "last" : stopped.interrupted), straight);
  }
}

LT_TEST_WORKER(SecondSignalExitsAtOnce) {
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({40, 2}), torch::randn({40, 1})), lt::DataLoaderOptions(4));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).default_root_dir(lt::testing::env_str("LT_DIR")).callbacks(
      {std::make_shared<RaiseSignalAt>(1, 2)}));
  trainer.fit(std::make_shared<Tiny>(), data);
  return 0;  // not reached
}

TEST(Signals, SecondSignalExitsAtOnceWithoutCheckpoint) {
  TempDir dir;
  lt::testing::WorkerOptions options;
  options.env["LT_DIR"] = dir.path.string();
  auto r = lt::testing::run_workers("SecondSignalExitsAtOnce", 1, options);
  EXPECT_EQ(r.exits[0].exit_code, 128 + SIGTERM) << r.summary();
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs" / "version_0" / "interrupted.ckpt"));
}

}  // namespace
