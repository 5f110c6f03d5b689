// plugins/join/epoch_context.h, lockstep Join: on uneven ranks the replicas
// are identical after every optimizer step; a Timer, max_steps, mid-epoch
// validation, step-cadence checkpoints and EarlyStopping end or act on every
// rank at the same global_step; a collective in a hook a joined rank does not
// run is refused; mid-epoch checkpoints (of lists and streams) resume
// exactly. Real worker processes over Gloo; the oracle is the ranks' own
// agreement and an uninterrupted run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"
#include "support/row_stream.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

// -- replica identity ----------------------------------------------------------------------------

LT_TEST_WORKER(ReplicaIdentity) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {2, 7, 4};
  auto strategy = make_strategy();
  int64_t lockstep_steps = 0, pytorch_steps = 0;
  for (const std::string optim : {"momentum", "adam"}) {
    for (const lt::JoinMode mode : {lt::JoinMode::kLockstep, lt::JoinMode::kPyTorch}) {
      auto model = std::make_shared<JoinNet>();
      model->optim = optim;
      model->step_lr_every = 2;
      auto probe = std::make_shared<ReplicaChecksum>();
      strategy->options().join_mode(mode);
      lt::Trainer trainer(base_options(strategy, 3).max_epochs(2).accumulate_grad_batches(2).callbacks({probe}));
      trainer.fit(model, rank_loader(rank, counts[rank]));
      int64_t steps = 0;
      const bool identical = replicas_identical(*strategy, *probe, &steps);
      if (mode == lt::JoinMode::kLockstep) {
        // 4 windows per epoch (the longest rank: 7 batches, k = 2), 2 epochs, on every rank.
        LT_WORKER_CHECK(identical, optim, ": lockstep replicas differ after some optimizer step");
        LT_WORKER_CHECK(steps == 8 && trainer.global_step() == 8, optim, ": ", steps, " steps, global_step ",
                        trainer.global_step());
        lockstep_steps = steps;
      } else {
        // PyTorch's Join: the rank with 2 batches steps once per epoch; the replicas' states differ.
        LT_WORKER_CHECK(!identical, optim, ": pytorch mode unexpectedly kept the replicas identical");
        pytorch_steps = steps;
      }
    }
  }
  strategy->options().join_mode(lt::JoinMode::kLockstep);
  std::cerr << "rank " << rank << ": lockstep " << lockstep_steps << " steps, pytorch mode " << pytorch_steps
            << std::endl;
  return 0;
}

// The reproductions on 2 ranks with 21 and 20 batches: a Timer with
// interval: step (its per-step collective aborted gloo), and max_steps on a
// step the shorter rank never reaches by itself (20; 41 in epoch 2) with a
// ModelCheckpoint (a rank waited in its barrier). In lockstep the joined rank
// takes those steps, so each ends on every rank at the same global_step.
LT_TEST_WORKER(StepFeaturesOnUnevenRanks) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {21, 20};
  auto strategy = make_strategy();
  {
    auto model = std::make_shared<JoinNet>();
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(86400.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).callbacks({timer}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == 21, "Timer run: global_step ", trainer.global_step());
  }
  {
    // A limit of 0 s: every rank stops after the first step.
    auto model = std::make_shared<JoinNet>();
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(0.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(2).callbacks({timer}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == 1, "Timer 0 s: global_step ", trainer.global_step());
  }
  for (const int64_t max_steps : {20, 41}) {
    auto model = std::make_shared<JoinNet>();
    auto checkpoint = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(env_str("LT_CKPT_DIR")).save_last(true));
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(3).max_steps(max_steps).callbacks({checkpoint}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == max_steps, "max_steps ", max_steps, ": global_step ",
                    trainer.global_step());
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "max_steps ", max_steps, ": replicas differ");
  }
  // Stops while rank 1 (18 batches of 24) shadows: max_steps 21, and a
  // should_stop that every rank sets after step 20 (on_after_optimizer_step,
  // which a joined rank runs too). Every count is known, so Join is
  // scheduled (no heartbeat): the joined rank must stop shadowing there.
  for (const bool by_callback : {false, true}) {
    const std::vector<int64_t> longer = {24, 18};
    auto model = std::make_shared<JoinNet>();
    auto stopper = std::make_shared<lt::LambdaCallback>();
    stopper->on_after_optimizer_step_fn = [](lt::Trainer& trainer, lt::LightningModule&) {
      if (trainer.global_step() == 20) trainer.set_should_stop(true);
    };
    auto options = base_options(strategy, 2).max_epochs(2);
    if (by_callback) {
      options.callbacks({stopper});
    } else {
      options.max_steps(21);
    }
    lt::Trainer trainer(options);
    trainer.fit(model, rank_loader(rank, longer[rank]));
    const int64_t want = by_callback ? 20 : 21;
    LT_WORKER_CHECK(trainer.global_step() == want, "stop while shadowing (callback ", by_callback, "): global_step ",
                    trainer.global_step(), ", expected ", want);
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "stop while shadowing: replicas differ");
  }
  {
    // PyTorch's Join: the joined rank would not run the Timer's step hook; refused before the first step.
    strategy->options().join_mode(lt::JoinMode::kPyTorch);
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(86400.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).callbacks({timer}));
    bool refused = false;
    try {
      trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, counts[rank]));
    } catch (const lt::JoinCompatibilityError& e) {
      refused = std::string(e.what()).find("callback Timer") != std::string::npos;
    }
    strategy->options().join_mode(lt::JoinMode::kLockstep);
    LT_WORKER_CHECK(refused, "pytorch mode did not refuse a Timer with interval: step");
  }
  return 0;
}

namespace {

// Validates on its own two batches; records where each validation ran.
class ValidatingNet : public JoinNet {
 public:
  bool has_validation_step() const override { return true; }
  void on_validation_epoch_start() override {
    ++validations;
    points.push_back({static_cast<double>(global_step()), flat().sum().item<double>()});
  }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    log("val_loss", torch::mse_loss(forward(batch.data), batch.target), lt::LogOptions().sync_dist(true));
    log("val_checks", static_cast<double>(validations), lt::LogOptions().sync_dist(true));
  }
  int64_t validations = 0;
  std::vector<std::pair<double, double>> points;  // (global_step, parameter sum) at each validation
};

// Every rank's validation points, gathered: equal on every rank?
bool same_on_every_rank(lt::Strategy& strategy, const std::vector<std::pair<double, double>>& points) {
  torch::Tensor mine = torch::zeros({static_cast<int64_t>(points.size()), 2}, torch::kDouble);
  for (size_t i = 0; i < points.size(); ++i) {
    mine[i][0] = points[i].first;
    mine[i][1] = points[i].second;
  }
  const torch::Tensor all = strategy.all_gather(mine);
  return (all == all[0]).all().item<bool>();
}

}  // namespace

// Mid-epoch validation, step-cadence checkpoints and EarlyStopping after a
// mid-epoch validation, on 2 ranks with 3 and 8 batches: validation points
// are iterations of the longest rank's epoch, and rank 0 (out of data after
// 3) validates, saves and stops there with the others.
LT_TEST_WORKER(MidEpochFeaturesOnUnevenRanks) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {3, 8};
  auto strategy = make_strategy();
  const std::string dir = env_str("LT_CKPT_DIR");
  auto fit = [&](lt::TrainerOptions options, const std::shared_ptr<ValidatingNet>& model) {
    lt::Trainer trainer(std::move(options));
    trainer.fit(model, rank_loader(rank, counts[rank]), rank_loader(rank, 2));
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "replicas differ");
    LT_WORKER_CHECK(same_on_every_rank(*strategy, model->points), "the ranks validated at different points");
    return trainer.global_step();
  };
  {
    // A quarter of 8 batches: after iterations 2, 4, 6 and 8 (the epoch's end), twice; a checkpoint every 2
    // steps (rank 0, out of data after 3 batches, writes them), and a top-2 one on the synced train_loss.
    auto model = std::make_shared<ValidatingNet>();
    auto every = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dir).every_n_train_steps(2).save_top_k(-1).save_last(true));
    auto top = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dir + "/top").monitor("train_loss").every_n_train_steps(3).save_top_k(2));
    const int64_t steps =
        fit(base_options(strategy, 2).max_epochs(2).val_check_interval(0.25).callbacks({every, top}), model);
    LT_WORKER_CHECK(steps == 16 && model->validations == 8, steps, " steps, ", model->validations, " validations");
    LT_WORKER_CHECK(model->points[2].first == 6.0 && model->points[7].first == 16.0, "validated at steps ",
                    model->points[2].first, " and ", model->points[7].first);
    // The last save (step 16, by rank 0) holds the model every rank ends with.
    auto saved = std::make_shared<JoinNet>();
    lt::load_weights(*saved, dir + "/last.ckpt");
    LT_WORKER_CHECK(saved->flat().equal(model->flat()), "last.ckpt differs from the final model");
  }
  {
    // Every 3 batches with accumulate 2: after iteration 3 (mid-window: step 1) and 6 (step 3); 8 is not a
    // multiple of 3, so not at the end. Rank 0 runs the first in its loop, the second joined.
    auto model = std::make_shared<ValidatingNet>();
    const int64_t steps = fit(base_options(strategy, 2).val_check_interval(3).accumulate_grad_batches(2), model);
    LT_WORKER_CHECK(steps == 4 && model->validations == 2, steps, " steps, ", model->validations, " validations");
    LT_WORKER_CHECK(model->points[0].first == 1.0 && model->points[1].first == 3.0, "validated at steps ",
                    model->points[0].first, " and ", model->points[1].first);
  }
  {
    // EarlyStopping stops at the third validation (val_checks 3 > 2.5), after iteration 6: rank 0 has joined.
    auto model = std::make_shared<ValidatingNet>();
    auto stopping = std::make_shared<lt::EarlyStopping>(
        lt::EarlyStoppingOptions("val_checks").mode("max").stopping_threshold(2.5).verbose(false));
    const int64_t steps =
        fit(base_options(strategy, 2).max_epochs(3).val_check_interval(0.25).callbacks({stopping}), model);
    LT_WORKER_CHECK(steps == 6 && model->validations == 3, steps, " steps, ", model->validations, " validations");
  }
  return 0;
}

TEST(JoinLockstep, MidEpochValidationCheckpointsAndEarlyStoppingOnUnevenRanks) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_lockstep_mid_" + std::to_string(::getpid()));
  auto r = run_workers("MidEpochFeaturesOnUnevenRanks", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  const std::vector<std::string> expected = {
      "epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt",  "epoch=0-step=6.ckpt",  "epoch=0-step=8.ckpt",
      "epoch=1-step=10.ckpt", "epoch=1-step=12.ckpt", "epoch=1-step=14.ckpt", "epoch=1-step=16.ckpt",
      "last.ckpt",           "top"};
  EXPECT_EQ(names, expected);
  size_t top = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "top")) top += entry.path().extension() == ".ckpt";
  EXPECT_EQ(top, 2u);
  std::filesystem::remove_all(dir);
}

// A callback's collective in a hook a joined rank does not run (here
// on_train_batch_end) is refused on every rank at the first batch, with the
// way out, before it is issued: no gloo abort, no hang.
class BatchEndReduce : public lt::Callback {
 public:
  std::string name() const override { return "BatchEndReduce"; }
  void on_train_batch_end(lt::Trainer& trainer, lt::LightningModule&, const torch::Tensor& loss, const lt::Batch&,
                          int64_t) override {
    trainer.strategy().reduce(loss);
  }
};

LT_TEST_WORKER(UnmatchedCollectiveRefused) {
  const int rank = env_int("RANK");
  lt::Trainer trainer(base_options(make_strategy(), 2).callbacks({std::make_shared<BatchEndReduce>()}));
  try {
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, rank == 0 ? 2 : 3));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("strategy ddp: reduce issued by callback BatchEndReduce in on_train_batch_end (rank " +
                              std::to_string(rank) + ", epoch 0, batch 0)") != std::string::npos,
                    what);
    LT_WORKER_CHECK(what.find("on_after_optimizer_step") != std::string::npos, what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the unmatched collective was not refused");
  return 1;
}

TEST(JoinLockstep, ACollectiveInAHookJoinedRanksDoNotRunIsRefused) {
  expect_workers_pass("UnmatchedCollectiveRefused", 2, std::chrono::seconds(60));
}

// Mid-epoch checkpoints under DDP resume exactly: lockstep Join on 5 and 8
// batches (one taken while rank 0, which writes it, is joined) and pad on
// even shards; momentum and a per-step scheduler make any slip visible.
// With LT_STREAM=1 each rank's rows are a stream of unknown length (Join only:
// pad needs the counts): the resumed stream skips the batches done.
LT_TEST_WORKER(MidEpochResume) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  const std::string dir = env_str("LT_CKPT_DIR");
  struct Case {
    lt::UnevenInputs uneven;
    std::vector<int64_t> counts;
    std::vector<std::string> resume_from;
  };
  const std::vector<Case> cases = {
      {lt::UnevenInputs::kJoin, {5, 8}, {"epoch=0-step=6.ckpt", "epoch=1-step=12.ckpt"}},
      {lt::UnevenInputs::kPad, {6, 6}, {"epoch=0-step=3.ckpt", "epoch=1-step=9.ckpt"}}};
  for (const Case& c : cases) {
    if (env_int("LT_STREAM") != 0 && c.uneven != lt::UnevenInputs::kJoin) continue;
    strategy->options().uneven_inputs(c.uneven);
    const std::string ckpts = dir + (c.uneven == lt::UnevenInputs::kJoin ? "/join" : "/pad");
    auto run = [&](const std::string& ckpt_path, bool save) {
      auto model = std::make_shared<JoinNet>();
      model->optim = "momentum";
      model->step_lr_every = 2;
      auto options = base_options(strategy, 2).max_epochs(2);
      if (save) {
        options.callbacks({std::make_shared<lt::ModelCheckpoint>(
            lt::ModelCheckpointOptions().dirpath(ckpts).every_n_train_steps(3).save_top_k(-1))});
      }
      lt::Trainer trainer(options);
      trainer.fit(model, rank_loader(rank, c.counts[rank]), nullptr, ckpt_path);
      return model->flat();
    };
    const torch::Tensor straight = run("", /*save=*/true);
    for (const std::string& name : c.resume_from) {
      const torch::Tensor resumed = run(ckpts + "/" + name, /*save=*/false);
      LT_WORKER_CHECK(resumed.equal(straight), name, ": resumed weights differ by ",
                      (resumed - straight).abs().max().item<double>());
    }
  }
  strategy->options().uneven_inputs(lt::UnevenInputs::kJoin);
  return 0;
}

TEST(JoinLockstep, MidEpochCheckpointsResumeExactlyUnderJoinAndPad) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_mid_resume_" + std::to_string(::getpid()));
  auto r = run_workers("MidEpochResume", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

// Read by 3 loader workers: the resumed epoch replays the workers' turns (rank
// 0's 5 batches are 2, 2 and 1 of its workers') to stand at its batch.
TEST(JoinLockstep, MidEpochCheckpointsOfStreamsResumeExactlyUnderJoin) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_mid_resume_stream_" + std::to_string(::getpid()));
  auto r = run_workers(
      "MidEpochResume", 2,
      join_options("", {{"LT_CKPT_DIR", dir.string()}, {"LT_STREAM", "1"}, {"LT_STREAM_WORKERS", "3"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

TEST(JoinLockstep, TimerAndMaxStepsWorkOnUnevenRanks) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_lockstep_ckpt_" + std::to_string(::getpid()));
  auto r = run_workers("StepFeaturesOnUnevenRanks", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_TRUE(std::filesystem::exists(dir / "last.ckpt"));
  std::filesystem::remove_all(dir);
}

TEST(JoinLockstep, ReplicasAreIdenticalAfterEveryOptimizerStep) {
  auto r = run_workers("ReplicaIdentity", 3, join_options(""));
  EXPECT_TRUE(r.ok()) << r.summary();
}
