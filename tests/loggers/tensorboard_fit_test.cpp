// TensorBoardLogger: its events files decoded independently of our encoder by
// tests/python/tensorboard_events.py (the TFRecord CRCs computed in Python,
// the Event, Summary and HParams messages parsed by python3-protobuf from a
// .proto of TensorBoard's field numbers), version folders as CSVLogger picks
// them, buffering, resume, and nothing written before the first write.
// This file: a real fit and a resumed one, as the Trainer logs them.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/tensorboard.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/seeding.h"
#include "loggers/tensorboard_fixture.h"

using namespace lt::testing;  // the checker and its helpers (loggers/tensorboard_fixture.h)

namespace fs = std::filesystem;

namespace {

// -- a real fit --------------------------------------------------------------------------------------

class Regressor : public lt::LightningModule {
 public:
  Regressor() {
    fc = register_module("fc", torch::nn::Linear(4, 1));
    hparams()["lr"] = 0.05;
    hparams()["optimizer"] = "sgd";
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(fc(batch.data), batch.target);
    losses.push_back(loss.item<double>());
    log("loss", loss);
    return loss;
  }
  void validation_step(const lt::Batch& batch, int64_t) override {
    log("val_loss", torch::mse_loss(fc(batch.data), batch.target));
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05));
  }
  torch::nn::Linear fc{nullptr};
  std::vector<double> losses;
};

std::shared_ptr<lt::DataLoader> regression_data() {
  auto gen = at::detail::createCPUGenerator(3);
  auto x = torch::randn({24, 4}, gen);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, x.sum(1, true)),
                                          lt::DataLoaderOptions(4));
}

TEST_F(TensorBoardLoggerTest, AFitLogsEveryStepsLossAndTheModulesHparams) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  auto logger = std::make_shared<lt::TensorBoardLogger>(lt::TensorBoardLoggerOptions(dir_.string()));
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(lt::TrainerOptions()
                          .max_epochs(2)
                          .log_every_n_steps(1)
                          .logger(logger)
                          .enable_progress_bar(false)
                          .default_root_dir(dir_.string()));
  trainer.fit(model, regression_data());
  ASSERT_EQ(model->losses.size(), 12u);

  const auto files = events_files(dir_ / "lightning_logs" / "version_0");
  ASSERT_EQ(files.size(), 1u);
  const Decoded d = decode(files[0]);
  ASSERT_EQ(d.rc, 0) << d.output;
  std::vector<std::string> expected;
  for (size_t i = 0; i < model->losses.size(); ++i) {
    expected.push_back(scalar(static_cast<int64_t>(i + 1), "loss", model->losses[i]));
  }
  EXPECT_EQ(scalars(d, "loss"), expected) << d.output;
  // The epoch beside every step's values, as Lightning's logger connector adds it.
  expected.clear();
  for (size_t i = 0; i < model->losses.size(); ++i) {
    expected.push_back(scalar(static_cast<int64_t>(i + 1), "epoch", static_cast<double>(i / 6)));
  }
  EXPECT_EQ(scalars(d, "epoch"), expected) << d.output;
  for (const std::string& line : {std::string("hparams session_start_info lr number ") + g17(0.05),
                                  std::string("hparams session_start_info optimizer string sgd"),
                                  std::string("hparams experiment hparam lr DATA_TYPE_FLOAT64")}) {
    EXPECT_NE(std::find(d.lines.begin(), d.lines.end(), line), d.lines.end()) << line << "\n" << d.output;
  }
}

// A fit stopped after its first epoch's checkpoint and resumed from "last"
// shows TensorBoard what the uninterrupted fit shows: the resumed run's file
// opens with SessionLog START at the step after the checkpoint's last logged
// step, which hides the crashed run's later steps.
TEST_F(TensorBoardLoggerTest, AResumedFitShowsWhatAnUninterruptedFitShows) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  struct CrashAt : lt::Callback {
    explicit CrashAt(int64_t s) : step(s) {}
    std::string name() const override { return "crash"; }
    void on_train_batch_end(lt::Trainer& t, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                            int64_t) override {
      if (t.global_step() == step) throw std::runtime_error("crash");
    }
    int64_t step;
  };
  auto fit = [&](const fs::path& save_dir, std::vector<std::shared_ptr<lt::Callback>> callbacks,
                 const std::string& ckpt_path) {
    callbacks.push_back(std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().save_last(true)));
    lt::Trainer trainer(lt::TrainerOptions()
                            .max_epochs(3)
                            .log_every_n_steps(1)
                            .enable_progress_bar(false)
                            .callbacks(callbacks)
                            .logger(std::make_shared<lt::TensorBoardLogger>(
                                lt::TensorBoardLoggerOptions(save_dir.string()).flush_secs(0))));
    torch::manual_seed(0);
    trainer.fit(std::make_shared<Regressor>(), regression_data(), regression_data(), ckpt_path);
  };
  fit(dir_ / "straight", {}, "");
  EXPECT_THROW(fit(dir_ / "run", {std::make_shared<CrashAt>(9)}, ""), std::runtime_error);
  fit(dir_ / "run", {}, "last");

  const auto straight = events_files(dir_ / "straight" / "lightning_logs" / "version_0");
  const auto run = events_files(dir_ / "run" / "lightning_logs" / "version_0");
  ASSERT_EQ(straight.size(), 1u);
  ASSERT_EQ(run.size(), 2u) << "the crashed run's file and the resumed run's";
  EXPECT_FALSE(fs::exists(dir_ / "run" / "lightning_logs" / "version_1"));
  const Decoded expected = decode(straight[0]);
  ASSERT_EQ(expected.rc, 0) << expected.output;
  // Files of one second sort by their counter, the crashed run's first.
  Decoded crashed = decode(run[0]), resumed = decode(run[1]);
  ASSERT_EQ(crashed.rc, 0) << crashed.output;
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  if (resumed.lines.size() < 2 || resumed.lines[1].rfind("session_log", 0) != 0) std::swap(crashed, resumed);
  ASSERT_GE(resumed.lines.size(), 2u) << resumed.output;
  ASSERT_EQ(resumed.lines[1].rfind("session_log ", 0), 0u) << resumed.output;
  const int64_t purge_step = std::stoll(resumed.lines[1].substr(12));
  EXPECT_EQ(resumed.lines[1], "session_log " + std::to_string(purge_step) + " START");

  // What TensorBoard shows: the crashed run's scalars before the purge step,
  // then the resumed run's (hp_metric, at step 0, is logged by each run).
  std::vector<std::string> shown;
  for (const auto& l : scalars(crashed)) {
    if (step_of(l) < purge_step) shown.push_back(l);
  }
  size_t hidden = scalars(crashed).size() - shown.size();
  for (const auto& l : scalars(resumed)) {
    if (l.find(" hp_metric ") == std::string::npos) shown.push_back(l);
  }
  EXPECT_EQ(shown, scalars(expected)) << "crashed:\n" << crashed.output << "\nresumed:\n" << resumed.output;
  EXPECT_GT(hidden, 0u) << "the crash came after the checkpoint: some steps are hidden";
}

}  // namespace
