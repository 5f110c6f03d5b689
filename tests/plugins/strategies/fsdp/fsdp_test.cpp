// The fsdp strategy: sharded gradients and optimizer state under lockstep
// Join, against the Python oracle's window rule (tests/fixtures/join_lockstep.txt:
// PyTorch's own FSDP has no Join and its ZeroRedundancyOptimizer under Join
// steps stale shards, so the oracle is the single-optimizer window rule) and
// against the ddp strategy. Real worker processes, gloo on 127.0.0.1.
// This file: the strategy's options: reduce_dtype float16
// against ddp's fp16 compress hook, and HYBRID_SHARD refused on ranks not
// laid out node by node.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include <lightning_cpp/lightning.h>

#include "distributed/join_oracle.h"
#include "plugins/strategies/fsdp/fsdp_fixture.h"
#include "support/multiprocess.h"

// env_int, the Join oracle's model, data and fixtures, fsdp(), ddp(), options()
// (plugins/strategies/fsdp/fsdp_fixture.h).
using namespace lt::testing;

// reduce_dtype float16 (PyTorch's MixedPrecision.reduce_dtype) reduces the
// gradients as ddp's fp16_compress_hook does (cast, divide by the world size,
// reduce, cast back): on 2 ranks with 3 and 5 batches (lockstep Join), Adam,
// 2 epochs, every sharding ends with ddp-with-the-hook's weights, bitwise,
// and not with float32 ddp's (the reduction really ran in float16).
LT_TEST_WORKER(FsdpReduceDtype) {
  const int rank = env_int("RANK");
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<JoinNet>(units);
    model->optim = "adam";
    lt::Trainer trainer(options(strategy, 2).max_epochs(2));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    return model->flat();
  };
  ddp()->options().ddp_comm_hook(lt::DDPCommHook::kFp16Compress);
  const torch::Tensor hooked = train(ddp(), false);
  ddp()->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
  const torch::Tensor fp32 = train(ddp(), false);
  LT_WORKER_CHECK((hooked - fp32).abs().max().item<double>() > 1e-6, "float16 reductions changed nothing");
  fsdp()->options().reduce_dtype(lt::ReduceDtype::kFloat16);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard,
                              lt::ShardingStrategy::kNoShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const torch::Tensor sharded = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    const double differ = (sharded - hooked).abs().max().item<double>();
    LT_WORKER_CHECK(differ == 0.0, lt::OptionCodec<lt::ShardingStrategy>::show(sharding),
                    " with reduce_dtype float16 differs from ddp's fp16_compress_hook by ", differ);
  }
  fsdp()->options().reduce_dtype(lt::ReduceDtype::kFloat32).sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpMixedPrecision, ReduceDtypeFloat16ReducesAsDdpsFp16CompressHook) {
  expect_workers_pass("FsdpReduceDtype", 2, std::chrono::seconds(90));
}

// lt::grad_norm under every strategy: the total norm of the gradients each
// step (2-norm and infinity-norm), read in on_before_optimizer_step on 2 ranks
// with 3 batches each, is ddp's under every sharding (within 1e-6: the shards'
// partial sums add in another order). Under fsdp the module's parameters hold
// no gradient (a user's own norm over them was 0.0): no per-parameter entries.
LT_TEST_WORKER(FsdpGradNorm) {
  const int rank = env_int("RANK");
  struct Net : JoinNet {
    using JoinNet::JoinNet;
    void on_before_optimizer_step(torch::optim::Optimizer&) override {
      const auto two = lt::grad_norm(*this, 2.0), inf = lt::grad_norm(*this, INFINITY);
      totals.push_back(two.at("grad_2.0_norm_total"));
      totals.push_back(inf.at("grad_inf_norm_total"));
      per_parameter = two.size() - 1;
      if (per_parameter > 0) {  // the module's own gradients: their norm is the total
        double squares = 0;
        for (const auto& [name, norm] : two) squares += name == "grad_2.0_norm_total" ? 0.0 : norm * norm;
        own_total = std::sqrt(squares);
      }
    }
    std::vector<double> totals;
    size_t per_parameter = 0;
    double own_total = -1;
  };
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<Net>(units);
    lt::Trainer trainer(options(strategy, 2).max_epochs(1));
    trainer.fit(model, rank_loader(rank, 3));
    return model;
  };
  const auto reference = train(ddp(), false);
  LT_WORKER_CHECK(reference->totals.size() == 6 && reference->totals[0] > 0, reference->totals.size());
  LT_WORKER_CHECK(reference->per_parameter == 4, "ddp: per-parameter norms ", reference->per_parameter);
  LT_WORKER_CHECK(std::abs(reference->own_total - reference->totals[4]) <= 1e-6 * reference->totals[4],
                  "ddp: the parameters' norms give ", reference->own_total, ", the total is ", reference->totals[4]);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const auto sharded = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    LT_WORKER_CHECK(sharded->per_parameter == 0, "fsdp: per-parameter norms ", sharded->per_parameter);
    LT_WORKER_CHECK(sharded->totals.size() == reference->totals.size(), sharded->totals.size());
    for (size_t i = 0; i < reference->totals.size(); ++i) {
      const double want = reference->totals[i], got = sharded->totals[i];
      LT_WORKER_CHECK(std::abs(got - want) <= 1e-6 * want, lt::OptionCodec<lt::ShardingStrategy>::show(sharding),
                      ": step ", i / 2, (i % 2 == 0 ? " 2-norm " : " inf-norm "), got, ", ddp's ", want);
    }
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpGradNorm, TheTotalNormIsDdpsUnderEverySharding) {
  expect_workers_pass("FsdpGradNorm", 2, std::chrono::seconds(90));
}

// A scheduler that also moves the momentum (OneCycleLR, per step) under
// uneven inputs (3 and 5 batches, lockstep Join, 2 epochs: 10 steps on both
// ranks): every rank ends at the schedule's last rate and momentum, and fsdp
// ends with ddp's weights under both shardings (the shards' optimizer follows
// the rates and momentum the scheduler sets).
LT_TEST_WORKER(FsdpOneCycleUnderJoin) {
  const int rank = env_int("RANK");
  constexpr int64_t kSteps = 10;
  struct Net : JoinNet {
    using JoinNet::JoinNet;
    lt::OptimizerConfig configure_optimizers() override {
      auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
      return lt::OptimizerConfig(sgd, std::make_shared<lt::OneCycleLR>(*sgd, lt::OneCycleLROptions(0.1, kSteps)),
                                 lt::Interval::kStep);
    }
    void on_train_end() override {
      auto& options = static_cast<torch::optim::SGDOptions&>(optimizer().param_groups()[0].options());
      lr = options.lr();
      momentum = options.momentum();
    }
    double lr = -1, momentum = -1;
  };
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<Net>(units);
    lt::Trainer trainer(options(strategy, 2).max_epochs(2));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    LT_WORKER_CHECK(trainer.global_step() == kSteps, trainer.global_step());
    return model;
  };
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.01).momentum(0.9));
  lt::OneCycleLR schedule(sgd, lt::OneCycleLROptions(0.1, kSteps));
  for (int64_t i = 0; i < kSteps; ++i) schedule.step();
  const double lr = lt::get_lr(sgd.param_groups()[0]);
  const double momentum = static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).momentum();
  const auto reference = train(ddp(), false);
  LT_WORKER_CHECK(reference->lr == lr && reference->momentum == momentum, "ddp: lr ", reference->lr, " momentum ",
                  reference->momentum, ", the schedule's ", lr, " ", momentum);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const auto sharded = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    LT_WORKER_CHECK(sharded->lr == lr && sharded->momentum == momentum, "fsdp: lr ", sharded->lr);
    const double differ = (sharded->flat() - reference->flat()).abs().max().item<double>();
    LT_WORKER_CHECK(differ <= 1e-6, lt::OptionCodec<lt::ShardingStrategy>::show(sharding), " differs from ddp by ",
                    differ);
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpSchedulers, OneCycleUnderJoinEndsAtTheSchedulesRateAndDdpsWeights) {
  expect_workers_pass("FsdpOneCycleUnderJoin", 2, std::chrono::seconds(90));
}

// HYBRID_SHARD on ranks that are not laid out node by node (here rank 0 on
// node 1 and rank 1 on node 0) is refused on every rank, naming the layout.
LT_TEST_WORKER(FsdpHybridLayoutRefused) {
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kHybridShard);
  try {
    lt::Trainer trainer(options(fsdp(), 2));
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(env_int("RANK"), 2));
  } catch (const lt::ValueError& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("HYBRID_SHARD") != std::string::npos &&
                        what.find("global rank = node_rank * local_world_size + local_rank") != std::string::npos &&
                        what.find(c10::str("this rank is ", env_int("RANK"), " of 2, node ", 1 - env_int("RANK"))) !=
                            std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the layout was not refused");
  return 1;
}

TEST(FsdpStrategy, HybridShardOnRanksNotLaidOutByNodeIsRefusedOnEveryRank) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.rank_env = {{{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}, {"GROUP_RANK", "1"}},
                      {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}, {"GROUP_RANK", "0"}}};
  const WorkersResult result = run_workers("FsdpHybridLayoutRefused", 2, options);
  EXPECT_TRUE(result.ok()) << result.summary();
}
