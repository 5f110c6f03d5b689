// No lost work (trainer/checkpoint.cpp, core/checkpoint_io.h's atomic save): a
// checkpoint save killed at any moment leaves the previous checkpoint
// loadable; a truncated or corrupt ckpt_path is a clear error; files written
// are not world-writable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/reliability_fixture.h"

using namespace lt::testing::reliability;  // TempDir, Tiny, start_worker, contains (reliability_fixture.h)

namespace {

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
    auto saved_this_round = [&] {
      std::error_code ec;
      return fs::exists(path, ec) && fs::last_write_time(path, ec) >= round_start;
    };
    bool saved = false;
    for (int i = 0; i < 600 && !saved; ++i) {
      saved = saved_this_round();
      if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(saved) << "round " << round << ": the worker completed no save within 30 s";
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round;
    // What is there now was written in this round: a save the kill interrupted left no trace.
    EXPECT_TRUE(saved_this_round()) << "round " << round;
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
