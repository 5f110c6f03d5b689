// Fabric: a loop the user keeps, on the Trainer's no_sync + Join context.
// Real worker processes with a gloo process group; the Python oracle's
// fixtures (tests/fixtures/join_lockstep.txt: lockstep rows follow the
// single-optimizer window rule, which PyTorch's Join breaks for stateful
// optimizers; pytorch rows are PyTorch DDP + Join) are the reference.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/lightning.h>

#include "distributed/join_oracle.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // env_int, the Join oracle's model, data and fixtures

namespace {

// JoinNet's layers as a plain torch::nn::Module (Fabric wraps it): the same
// names, so its checkpoints are the LightningModule's.
struct PlainNet : torch::nn::Module {
  PlainNet() {
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    init_like_oracle(*this);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l2(torch::tanh(l1(x))); }
  torch::nn::Linear l1{nullptr};
  torch::nn::Linear l2{nullptr};
};

// tests/python/join_oracle.py's make_optimizer.
lt::OptimizerConfig make_optimizer(torch::nn::Module& module, const std::string& optim) {
  if (optim == "adam") return std::make_shared<torch::optim::Adam>(module.parameters(), torch::optim::AdamOptions(0.01));
  return std::make_shared<torch::optim::SGD>(module.parameters(),
                                             torch::optim::SGDOptions(kLr).momentum(optim == "momentum" ? 0.9 : 0.0));
}

torch::Tensor flat(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().reshape(-1));
  return torch::cat(out);
}

// One per worker process: its process group lives as long as the strategy.
std::shared_ptr<lt::DDPStrategy> ddp() {
  static auto strategy = std::make_shared<lt::DDPStrategy>(
      lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  return strategy;
}

std::shared_ptr<lt::FSDPStrategy> fsdp() {
  static auto strategy = std::make_shared<lt::FSDPStrategy>(
      lt::FSDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  return strategy;
}

struct RunConfig {
  std::vector<int64_t> counts;
  int64_t k = 1;
  int64_t epochs = 1;
  std::string optim = "sgd";
  bool plain = false;  // a plain torch::nn::Module (else the LightningModule JoinNet)
  bool units = false;  // JoinNet's Linears declared lt::FSDPUnit
  std::string load;    // a checkpoint to start from
  int64_t save_after_epochs = -1;
  std::string save;
  std::shared_ptr<lt::Strategy> strategy = ddp();
};

struct RunResult {
  torch::Tensor params;
  int64_t global_step = 0;
};

// The loop a user writes: an epoch of its own rank's batches in fabric.join().
RunResult fabric_run(const RunConfig& c) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  std::shared_ptr<torch::nn::Module> model;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  if (c.plain) {
    auto net = std::make_shared<PlainNet>();
    forward = [net](const torch::Tensor& x) { return net->forward(x); };
    model = net;
  } else {
    auto net = std::make_shared<JoinNet>(c.units);
    net->optim = c.optim;
    forward = [net](const torch::Tensor& x) { return net->forward(x); };
    model = net;
  }
  RunResult result;
  lt::Fabric fabric(lt::FabricOptions().strategy(c.strategy).devices(ws));
  fabric.launch([&](lt::Fabric& f) {
    std::shared_ptr<torch::optim::Optimizer> optimizer;
    if (c.plain) {
      optimizer = f.setup(model, [&](torch::nn::Module& m) { return make_optimizer(m, c.optim); }).optimizer;
    } else {
      optimizer = f.setup(model).optimizer;  // JoinNet::configure_optimizers
    }
    auto loader = rank_loader(rank, c.counts[rank]);
    f.setup_dataloader(*loader, /*use_distributed_sampler=*/false);
    if (!c.load.empty()) f.load(c.load);
    auto step = [&] {
      optimizer->step();
      optimizer->zero_grad();
    };
    while (f.current_epoch() < c.epochs) {
      for (lt::Batch& batch : f.join(*loader, step, lt::JoinOptions().accumulate_grad_batches(c.k))) {
        f.backward(torch::mse_loss(forward(batch.data), batch.target));
      }
      if (f.current_epoch() == c.save_after_epochs) f.save(c.save);
    }
    result.global_step = f.global_step();
  });
  result.params = flat(*model);
  return result;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

// Every row of the lockstep fixture for this world size: lockstep rows
// against the window rule, pytorch rows against PyTorch DDP + Join; even
// rows with a plain torch::nn::Module, odd ones with the LightningModule;
// the Adam rows against the Trainer's run too. With LT_FSDP=1 under the
// fsdp strategy's FULL_SHARD, lockstep rows only: the plain module one unit,
// JoinNet's Linears declared units.
LT_TEST_WORKER(FabricLockstepMatrix) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  const bool sharded = env_int("LT_FSDP") != 0;
  std::shared_ptr<lt::ParallelStrategy> strategy = ddp();
  if (sharded) {
    strategy = fsdp();
    fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  }
  int checked = 0, against_trainer = 0;
  for (const LockstepConfig& c : read_lockstep()) {
    if (c.ws != ws || (sharded && c.mode != "lockstep")) continue;
    if (sharded) {
      fsdp()->options().join_divide_by_initial_world_size(c.divide);
    } else {
      ddp()->options()
          .join_mode(c.mode == "pytorch" ? lt::JoinMode::kPyTorch : lt::JoinMode::kLockstep)
          .join_divide_by_initial_world_size(c.divide);
    }
    RunConfig run;
    run.strategy = strategy;
    run.counts = c.counts;
    run.k = c.k;
    run.epochs = c.epochs;
    run.optim = c.optim;
    run.plain = checked % 2 == 0;
    run.units = sharded;  // the plain module: one unit
    const RunResult fabric = fabric_run(run);
    const torch::Tensor all = strategy->all_gather(fabric.params);
    const double error = max_diff(fabric.params, torch::tensor(c.params, torch::kDouble));
    const double spread = (all - all[0]).abs().max().item<double>();
    LT_WORKER_CHECK(error <= 1e-6 && spread == 0.0, c.describe(), ": error=", error, " spread across ranks=", spread);
    if (c.optim == "adam") {
      // The same units as the Fabric run's model (gloo's ring sums an element in an order set by where it sits).
      auto model = std::make_shared<JoinNet>(run.units && !run.plain);
      model->optim = c.optim;
      lt::Trainer trainer(lt::TrainerOptions()
                              .strategy(strategy)
                              .devices(ws)
                              .max_epochs(c.epochs)
                              .accumulate_grad_batches(c.k)
                              .enable_progress_bar(false)
                              .enable_model_summary(false)
                              .default_logger(false));
      trainer.fit(model, rank_loader(rank, c.counts[rank]));
      LT_WORKER_CHECK(model->flat().equal(fabric.params), c.describe(), ": the Trainer's run differs by ",
                      max_diff(model->flat(), fabric.params));
      ++against_trainer;
    }
    ++checked;
  }
  ddp()->options().join_mode(lt::JoinMode::kLockstep).join_divide_by_initial_world_size(true);
  fsdp()->options().join_divide_by_initial_world_size(true).sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  std::cerr << "rank " << rank << ": " << checked << " configurations match the oracle, " << against_trainer
            << " the Trainer's run bitwise" << std::endl;
  LT_WORKER_CHECK(checked > 0 && against_trainer > 0, "no configuration for world size ", ws);
  return 0;
}

TEST(FabricJoin, LoopOnTheLockstepMatrixEqualsTheOracleAndTheTrainerOnTwoRanks) {
  expect_workers_pass("FabricLockstepMatrix", 2, std::chrono::seconds(180));
}

TEST(FabricJoin, LoopOnTheLockstepMatrixEqualsTheOracleAndTheTrainerOnThreeRanks) {
  expect_workers_pass("FabricLockstepMatrix", 3, std::chrono::seconds(180));
}

TEST(FabricJoin, LoopOnTheLockstepMatrixEqualsTheOracleAndTheTrainerOnFourRanks) {
  expect_workers_pass("FabricLockstepMatrix", 4, std::chrono::seconds(180));
}

TEST(FabricJoin, LoopUnderFsdpFullShardOnTheLockstepMatrixEqualsTheOracleAndTheTrainerOnTwoAndThreeRanks) {
  expect_workers_pass("FabricLockstepMatrix", 2, std::chrono::seconds(180), {{"LT_FSDP", "1"}});
  expect_workers_pass("FabricLockstepMatrix", 3, std::chrono::seconds(180), {{"LT_FSDP", "1"}});
}

// A collective in the loop's body, which a rank that ran out of data could
// not match, is refused where it is issued: at the first batch, before any
// step, on every rank, with the fix. With even inputs the same loop runs.
LT_TEST_WORKER(FabricBodyCollectiveRefused) {
  const int rank = env_int("RANK");
  for (const bool uneven : {true, false}) {
    auto model = std::make_shared<PlainNet>();
    const torch::Tensor initial = flat(*model).clone();
    int64_t steps = -1;
    std::string error;
    try {
      lt::Fabric fabric(lt::FabricOptions().strategy(ddp()).devices(2));
      fabric.launch([&](lt::Fabric& f) {
        auto optimizer = f.setup(model, [](torch::nn::Module& m) { return make_optimizer(m, "sgd"); }).optimizer;
        auto loader = rank_loader(rank, uneven && rank == 0 ? 2 : 4);
        f.setup_dataloader(*loader, /*use_distributed_sampler=*/false);
        auto step = [&] {
          optimizer->step();
          optimizer->zero_grad();
        };
        for (lt::Batch& batch : f.join(*loader, step)) {
          torch::Tensor loss = torch::mse_loss(model->forward(batch.data), batch.target);
          f.all_reduce(loss.detach());  // e.g. a metric averaged over the ranks
          f.backward(loss);
        }
        steps = f.global_step();
      });
    } catch (const lt::Error& e) {
      error = e.what();
    }
    if (!uneven) {
      LT_WORKER_CHECK(error.empty() && steps == 4, "even inputs: ", error, " steps=", steps);
      continue;
    }
    LT_WORKER_CHECK(error.find("strategy ddp: reduce issued in the body of a fabric.join() epoch's loop (rank " +
                               std::to_string(rank) + ", epoch 0, batch 0)") != std::string::npos,
                    error);
    LT_WORKER_CHECK(error.find("Issue it in the step given to fabric.join") != std::string::npos, error);
    LT_WORKER_CHECK(flat(*model).equal(initial), "a step was taken before the refusal");
  }
  return 0;
}

TEST(FabricJoin, ACollectiveInTheLoopBodyIsRefusedBeforeTheFirstStepOnUnevenInputs) {
  expect_workers_pass("FabricBodyCollectiveRefused", 2, std::chrono::seconds(60));
}

// Checkpoints cross between Fabric and the Trainer exactly: counts 5 and 8,
// accumulation 2, Adam, 3 epochs. The Trainer's uninterrupted run (writing a
// mid-epoch checkpoint at step 6, in epoch 1) is the reference; Fabric's
// uninterrupted run, Fabric resumed from the Trainer's mid-epoch checkpoint,
// and the Trainer resumed from Fabric's checkpoint after epoch 0 all end
// with its weights, bitwise.
LT_TEST_WORKER(FabricTrainerCheckpoints) {
  const int rank = env_int("RANK");
  const std::string dir = env_str("LT_CKPT_DIR");
  const std::vector<int64_t> counts = {5, 8};
  auto trainer_run = [&](const std::string& ckpt_path, bool save) {
    auto model = std::make_shared<JoinNet>();
    model->optim = "adam";
    auto options = lt::TrainerOptions()
                       .strategy(ddp())
                       .devices(2)
                       .max_epochs(3)
                       .accumulate_grad_batches(2)
                       .enable_progress_bar(false)
                       .enable_model_summary(false)
                       .default_logger(false);
    if (save) {
      options.callbacks({std::make_shared<lt::ModelCheckpoint>(
          lt::ModelCheckpointOptions().dirpath(dir + "/trainer").every_n_train_steps(6).save_top_k(-1))});
    }
    lt::Trainer trainer(options);
    trainer.fit(model, rank_loader(rank, counts[rank]), nullptr, ckpt_path);
    return model->flat();
  };
  const torch::Tensor reference = trainer_run("", /*save=*/true);
  RunConfig run;
  run.counts = counts;
  run.k = 2;
  run.epochs = 3;
  run.optim = "adam";
  run.plain = true;
  const RunResult straight = fabric_run(run);
  LT_WORKER_CHECK(straight.params.equal(reference) && straight.global_step == 12,
                  "Fabric's run differs from the Trainer's by ", max_diff(straight.params, reference), " (",
                  straight.global_step, " steps)");
  run.load = dir + "/trainer/epoch=1-step=6.ckpt";
  const RunResult resumed = fabric_run(run);
  LT_WORKER_CHECK(resumed.params.equal(reference) && resumed.global_step == 12,
                  "Fabric resumed from the Trainer's mid-epoch checkpoint differs by ",
                  max_diff(resumed.params, reference), " (", resumed.global_step, " steps)");
  run.load.clear();
  run.epochs = 1;
  run.save_after_epochs = 1;
  run.save = dir + "/fabric_epoch0.ckpt";
  fabric_run(run);
  const torch::Tensor from_fabric = trainer_run(run.save, /*save=*/false);
  LT_WORKER_CHECK(from_fabric.equal(reference), "the Trainer resumed from Fabric's checkpoint differs by ",
                  max_diff(from_fabric, reference));
  return 0;
}

TEST(FabricJoin, CheckpointsResumeExactlyUnderTheTrainerAndTheReverse) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_fabric_ckpt_" + std::to_string(::getpid()));
  WorkerOptions options;
  options.timeout = std::chrono::seconds(90);
  options.env = {{"LT_CKPT_DIR", dir.string()}};
  auto r = run_workers("FabricTrainerCheckpoints", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

// examples/fabric as a user runs it: two local workers on per-rank slices of
// different sizes (rank 1 has twice rank 0's batches), then the same command
// resumes from the checkpoint it saved and trains one epoch more.
TEST(FabricExample, TrainsOnUnevenPerRankDataAndResumesFromItsCheckpoint) {
  if (!std::filesystem::exists(std::string(lt::kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no Fashion-MNIST in " << lt::kFashionMnistDir;
  }
  const auto dir = std::filesystem::temp_directory_path() / ("lt_fabric_example_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string ckpt = (dir / "run.ckpt").string();
  auto run = [&](int64_t epochs) {
    const std::string out = (dir / "out.txt").string();
    const std::string cmd = c10::str("timeout 120 ", LT_FABRIC_EXAMPLE, " --devices 2 --epochs ", epochs,
                                     " --limit-batches 10 --ckpt ", ckpt, " > ", out, " 2>&1");
    const int rc = std::system(cmd.c_str());
    return std::make_pair(WEXITSTATUS(rc), read_file(out));
  };
  const auto [rc, out] = run(2);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("epoch 1: mean training loss"), std::string::npos) << out;
  // 10 and 20 batches, windows of 2: 10 steps per epoch on both ranks (lockstep).
  EXPECT_NE(out.find("(20 steps)"), std::string::npos) << out;
  const auto at = out.find("test accuracy: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 15)), 0.4) << out;  // 10 classes: chance is 0.1
  const auto [rc2, out2] = run(3);
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("resumed from " + ckpt + " at epoch 2, step 20"), std::string::npos) << out2;
  EXPECT_NE(out2.find("epoch 2: mean training loss"), std::string::npos) << out2;
  EXPECT_NE(out2.find("(30 steps)"), std::string::npos) << out2;
  std::filesystem::remove_all(dir);
}
