// No lost work: a checkpoint save killed at any moment leaves the previous
// checkpoint loadable; a truncated or corrupt ckpt_path is a clear error; files
// written are not world-writable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tests/support/multiprocess.h"
#include "tests/support/seeding.h"
#include "trainer/check.h"
#include "trainer/checkpoint.h"
#include "trainer/signals.h"
#include "trainer/trainer.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

// Saves {"step": i, "payload": full(i)} to LT_CKPT_PATH forever.
LT_TEST_WORKER(SaveCheckpointsForever) {
  const std::string path = lt::testing::env_str("LT_CKPT_PATH");
  for (int64_t i = 1;; ++i) {
    lt::StateDict ckpt = lt::new_state_dict();
    ckpt.insert("step", i);
    ckpt.insert("payload", torch::full({512, 1024}, static_cast<float>(i)));  // 2 MiB: saves take a while
    lt::atomic_pickle_save(ckpt, path);
  }
  return 0;
}

pid_t start_worker(const std::string& name, const std::map<std::string, std::string>& env) {
  std::vector<std::string> strings;
  for (char** e = environ; *e; ++e) strings.emplace_back(*e);
  strings.push_back("LT_TEST_WORKER=" + name);
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string exe = lt::self_executable();
  const pid_t pid = fork();
  if (pid == 0) {
    char* argv[] = {const_cast<char*>(exe.c_str()), nullptr};
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  return pid;
}

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("lt_reliability_" + std::to_string(getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

TEST(Checkpoint, KillDuringSaveAlwaysLeavesAGoodCheckpoint) {
  TempDir dir;
  const std::string path = (dir.path / "last.ckpt").string();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delay_ms(0, 300);
  int64_t previous_step = 0;
  for (int round = 0; round < 8; ++round) {
    const auto round_start = fs::file_time_type::clock::now();
    const pid_t pid = start_worker("SaveCheckpointsForever", {{"LT_CKPT_PATH", path}});
    // Wait for this round's first completed save (process start-up takes a
    // while), then kill at a random moment of the following saves.
    for (int i = 0; i < 600; ++i) {
      std::error_code ec;
      if (fs::exists(path, ec) && fs::last_write_time(path, ec) >= round_start) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round;
    auto loaded = lt::pickle_load_file(path).toGenericDict();
    const int64_t step = loaded.at("step").toInt();
    auto payload = loaded.at("payload").toTensor();
    EXPECT_EQ(payload.sizes(), (std::vector<int64_t>{512, 1024})) << "round " << round;
    EXPECT_TRUE(torch::equal(payload, torch::full({512, 1024}, static_cast<float>(step)))) << "round " << round;
    EXPECT_GE(step, 1) << "round " << round;  // each round's worker counts from 1
    previous_step = step;
    const auto mode = fs::status(path).permissions();
    EXPECT_EQ(mode & fs::perms::others_write, fs::perms::none);
    EXPECT_EQ(mode & fs::perms::group_write, fs::perms::none);
  }
  EXPECT_GT(previous_step, 0);
}

class Tiny : public lt::LightningModule {
 public:
  Tiny() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override { return torch::mse_loss(fc(b.data), b.target); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.1);
  }
  torch::nn::Linear fc{nullptr};
};

std::string fit_error(const std::string& ckpt_path) {
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({8, 2}), torch::randn({8, 1})), lt::DataLoaderOptions(4));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2));
  try {
    trainer.fit(std::make_shared<Tiny>(), data, nullptr, ckpt_path);
  } catch (const lt::ValueError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Checkpoint, TruncatedOrCorruptCkptPathIsAClearError) {
  TempDir dir;
  const std::string good = (dir.path / "good.ckpt").string();
  {
    auto data = std::make_shared<lt::DataLoader>(
        std::make_shared<lt::TensorDataset>(torch::randn({8, 2}), torch::randn({8, 1})), lt::DataLoaderOptions(4));
    auto model = std::make_shared<Tiny>();
    class SaveAtEnd : public lt::Callback {
     public:
      explicit SaveAtEnd(std::string p) : path_(std::move(p)) {}
      std::string name() const override { return "save_at_end"; }
      void on_train_end(lt::Trainer& t, lt::LightningModule&) override { t.save_checkpoint(path_); }
      std::string path_;
    };
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).callbacks({std::make_shared<SaveAtEnd>(good)}));
    trainer.fit(model, data);
  }
  ASSERT_TRUE(fs::exists(good));

  const std::string truncated = (dir.path / "truncated.ckpt").string();
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, fs::file_size(good) / 2);
  std::string msg = fit_error(truncated);
  EXPECT_NE(msg.find("checkpoint '" + truncated + "' is truncated or corrupt"), std::string::npos) << msg;

  const std::string garbage = (dir.path / "garbage.ckpt").string();
  {
    std::ofstream out(garbage);
    out << "this is not a checkpoint";
  }
  msg = fit_error(garbage);
  EXPECT_NE(msg.find("checkpoint '" + garbage + "' is truncated or corrupt"), std::string::npos) << msg;

  msg = fit_error((dir.path / "missing.ckpt").string());
  EXPECT_NE(msg.find("does not exist or cannot be read"), std::string::npos) << msg;
}

}  // namespace

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
  try {
    trainer.fit(std::make_shared<Tiny>(), data);
    FAIL() << "expected lt::Interrupted";
  } catch (const lt::Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_STREQ(e.what(), "training interrupted by signal 15 at epoch 0, global step 3");
  }
  EXPECT_EQ(signal_cb->exception, "training interrupted by signal 15 at epoch 0, global step 3");
  auto ckpt = lt::pickle_load_file((dir.path / "interrupted.ckpt").string()).toGenericDict();
  EXPECT_EQ(ckpt.at("global_step").toInt(), 3);
  EXPECT_EQ(ckpt.at("epoch").toInt(), 0);
  // The handlers are gone after fit: the default action is back.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
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
  EXPECT_FALSE(fs::exists(dir.path / "interrupted.ckpt"));
}

}  // namespace
