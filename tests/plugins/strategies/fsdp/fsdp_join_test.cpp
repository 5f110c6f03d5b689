// The fsdp strategy: sharded gradients and optimizer state under lockstep
// Join, against the Python oracle's window rule (tests/fixtures/join_lockstep.txt:
// PyTorch's own FSDP has no Join and its ZeroRedundancyOptimizer under Join
// steps stale shards, so the oracle is the single-optimizer window rule) and
// against the ddp strategy. Real worker processes, gloo on 127.0.0.1.
// This file: every sharding on the lockstep matrix
// (tests/fixtures/join_lockstep.txt) against the oracle and ddp, and a
// window every rank pads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include <lightning_cpp/lightning.h>

#include "distributed/join_oracle.h"
#include "plugins/strategies/fsdp/fsdp_fixture.h"
#include "support/cuda.h"
#include "support/multiprocess.h"

// env_int, the Join oracle's model, data and fixtures, fsdp(), ddp(), options()
// (plugins/strategies/fsdp/fsdp_fixture.h).
using namespace lt::testing;

namespace {

// Saves the run's checkpoint at the end of fit (every rank: it is a collective under fsdp).
std::shared_ptr<lt::Callback> save_at_end(const std::string& path) {
  auto callback = std::make_shared<lt::LambdaCallback>();
  callback->on_train_end_fn = [path](lt::Trainer& trainer, lt::LightningModule&) { trainer.save_checkpoint(path); };
  return callback;
}

}  // namespace

// Every lockstep row of the fixture for this world size under SHARD_GRAD_OP,
// FULL_SHARD with declared units (NO_SHARD too for the SGD rows, FULL_SHARD
// with policy units for the momentum and Adam rows): the oracle's weights
// within 1e-6, the same on every rank; the Adam and momentum rows' optimizer
// state, consolidated from checkpoints, equals ddp's within 1e-6.
LT_TEST_WORKER(FsdpLockstepMatrix) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  const bool nodes = env_int("LOCAL_WORLD_SIZE") < ws;
  const std::string dir = env_str("LT_CKPT_DIR");
  int checked = 0, states = 0, hybrid = 0;
  for (const LockstepConfig& c : read_lockstep()) {
    if (c.ws != ws || c.mode != "lockstep") continue;
    const bool compare_state = c.optim != "sgd" && c.epochs == 3 && c.divide;
    std::vector<Sharding> shardings{{lt::ShardingStrategy::kShardGradOp},
                                    {lt::ShardingStrategy::kFullShard, /*declared_units=*/true}};
    // Ranks on nodes (4 ranks: 2 nodes of 2): HYBRID_SHARD, declared and policy units, in place of FULL_SHARD's policy units.
    const auto policy = nodes ? lt::ShardingStrategy::kHybridShard : lt::ShardingStrategy::kFullShard;
    if (c.optim == "sgd") shardings.push_back({lt::ShardingStrategy::kNoShard});
    if (c.optim == "sgd" && nodes) shardings.push_back({lt::ShardingStrategy::kHybridShard, /*declared_units=*/true});
    if (c.optim != "sgd") shardings.push_back({policy, false, /*min_num_params=*/5});
    std::vector<std::string> saved;
    for (const Sharding& sharding : shardings) {
      fsdp()
          ->options()
          .sharding_strategy(sharding.strategy)
          .auto_wrap_min_num_params(sharding.min_num_params)
          .join_divide_by_initial_world_size(c.divide)
          // HYBRID_SHARD's checkpoints sharded: the first node's ranks write the files.
          .state_dict_type(sharding.strategy == lt::ShardingStrategy::kHybridShard ? lt::StateDictType::kSharded
                                                                                    : lt::StateDictType::kFull);
      auto model = std::make_shared<JoinNet>(sharding.declared_units);
      model->optim = c.optim;
      auto run_options = options(fsdp(), ws).max_epochs(c.epochs).accumulate_grad_batches(c.k);
      if (compare_state && sharding.strategy != lt::ShardingStrategy::kNoShard) {
        saved.push_back(dir + "/fsdp" + std::to_string(saved.size()) + ".ckpt");
        run_options.callbacks({save_at_end(saved.back())});
      }
      lt::Trainer trainer(run_options);
      trainer.fit(model, rank_loader(rank, c.counts[rank]));
      const torch::Tensor params = model->flat();
      const torch::Tensor all = fsdp()->all_gather(params);
      const double error = (params - torch::tensor(c.params, torch::kDouble)).abs().max().item<double>();
      const double spread = (all - all[0]).abs().max().item<double>();
      LT_WORKER_CHECK(error <= 1e-6 && spread == 0.0, c.describe(), " ", sharding.name(), ": error=", error,
                      " spread across ranks=", spread);
      ++checked;
      hybrid += sharding.strategy == lt::ShardingStrategy::kHybridShard;
    }
    if (!compare_state) continue;
    ddp()->options().join_divide_by_initial_world_size(c.divide);
    auto model = std::make_shared<JoinNet>();
    model->optim = c.optim;
    lt::Trainer trainer(options(ddp(), ws)
                            .max_epochs(c.epochs)
                            .accumulate_grad_batches(c.k)
                            .callbacks({save_at_end(dir + "/ddp.ckpt")}));
    trainer.fit(model, rank_loader(rank, c.counts[rank]));
    const torch::Tensor whole = optimizer_state_of(dir + "/ddp.ckpt", c.optim);
    for (const std::string& path : saved) {
      const torch::Tensor sharded = optimizer_state_of(path, c.optim);
      LT_WORKER_CHECK(sharded.numel() == whole.numel() && sharded.numel() > 0, c.describe(), ": optimizer state of ",
                      sharded.numel(), " values in ", path, ", ", whole.numel(), " under ddp");
      const double differ = (sharded - whole).abs().max().item<double>();
      LT_WORKER_CHECK(differ <= 1e-6, c.describe(), ": the consolidated optimizer state of ", path,
                      " differs from ddp's by ", differ);
      ++states;
    }
  }
  fsdp()
      ->options()
      .sharding_strategy(lt::ShardingStrategy::kShardGradOp)
      .auto_wrap_min_num_params(0)
      .join_divide_by_initial_world_size(true)
      .state_dict_type(lt::StateDictType::kFull);
  ddp()->options().join_divide_by_initial_world_size(true);
  std::cerr << "rank " << rank << ": " << checked << " runs match the oracle (" << hybrid << " HYBRID_SHARD), "
            << states << " optimizer states ddp's" << std::endl;
  LT_WORKER_CHECK(checked > 0 && states > 0 && (hybrid > 0) == nodes, "nothing checked for world size ", ws);
  return 0;
}

namespace {
// Each rank's torchrun variables on nodes of `local` ranks.
std::vector<std::map<std::string, std::string>> on_nodes(int ranks, int local) {
  std::vector<std::map<std::string, std::string>> env;
  for (int r = 0; r < ranks; ++r) {
    env.push_back({{"LOCAL_RANK", std::to_string(r % local)},
                   {"LOCAL_WORLD_SIZE", std::to_string(local)},
                   {"GROUP_RANK", std::to_string(r / local)}});
  }
  return env;
}

// Four ranks are 2 nodes of 2 (HYBRID_SHARD's rows); on_gpu: the ranks share
// the one GPU, two single-GPU nodes (HYBRID_SHARD's rows too).
void expect_matrix(int ranks, bool on_gpu = false) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("lt_fsdp_matrix_" + std::to_string(::getpid()) + "_" + std::to_string(ranks));
  std::filesystem::create_directories(dir);
  WorkerOptions options;
  options.timeout = std::chrono::seconds(240);
  options.env = {{"LT_CKPT_DIR", dir.string()}};
  if (ranks == 4) options.rank_env = on_nodes(ranks, 2);
  if (on_gpu) options = sharing_one_gpu(ranks, options);
  const WorkersResult result = run_workers("FsdpLockstepMatrix", ranks, options);
  EXPECT_TRUE(result.ok()) << result.summary();
  std::filesystem::remove_all(dir);
}
}  // namespace

TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnTwoRanks) { expect_matrix(2); }
TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnThreeRanks) { expect_matrix(3); }
TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnFourRanksOnTwoNodes) { expect_matrix(4); }

// A window that every rank pads (1 batch each, accumulate_grad_batches 3:
// the epoch's only window ends past every rank's data), from the first
// step: no rank runs the micro-batch that reduces, so the units' order is
// learnt later; every sharding ends with ddp's weights (1e-6), Adam, 3 epochs.
LT_TEST_WORKER(FsdpEveryRankPads) {
  const int rank = env_int("RANK");
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<JoinNet>(units);
    model->optim = "adam";
    lt::Trainer trainer(options(strategy, 2).max_epochs(3).accumulate_grad_batches(3));
    trainer.fit(model, rank_loader(rank, 1 + rank));
    return model->flat();
  };
  const torch::Tensor reference = train(ddp(), false);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const torch::Tensor got = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    const double differ = (got - reference).abs().max().item<double>();
    LT_WORKER_CHECK(differ <= 1e-6, name_of(sharding), " differs from ddp by ", differ);
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpJoin, AWindowEveryRankPadsBeforeTheFirstReductionEndsAsDdp) {
  expect_workers_pass("FsdpEveryRankPads", 2, std::chrono::seconds(60));
}

// The matrix with every tensor on CUDA: two ranks share the one GPU over Gloo.
TEST(CudaFsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleOnTwoRanksSharingTheGpu) {
  LT_SKIP_WITHOUT_CUDA();
  expect_matrix(2, /*on_gpu=*/true);
}
