// core/signals.h through the Trainer: SIGINT/SIGTERM stop at the next step
// boundary and checkpoint; a second signal exits at once without one.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <lightning_cpp/callbacks/lambda_callback.h>
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
    // Where the run is and how to resume it: a stop on request, not a failure.
    const std::string ckpt = (fs::absolute(dir.path) / "interrupted.ckpt").lexically_normal().string();
    EXPECT_EQ(e.checkpoint(), ckpt);
    EXPECT_EQ(std::string(e.what()), "training interrupted by signal 15 at epoch 0, global step 3; stopped on request: " +
                                         ckpt + " holds the run; resume it with ckpt_path=" + ckpt);
  }
  EXPECT_EQ(signal_cb->exception, "training interrupted by signal 15 at epoch 0, global step 3");
  auto ckpt = lt::pickle_load_file((dir.path / "interrupted.ckpt").string()).toGenericDict();
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
  const auto resumed = run(7, (dir.path / "interrupted.ckpt").string());
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(straight[i].equal(resumed[i])) << "parameter " << i;
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
