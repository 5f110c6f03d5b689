// The fsdp strategy: sharded gradients and optimizer state under lockstep
// Join, against the Python oracle's window rule (tests/fixtures/join_lockstep.txt:
// PyTorch's own FSDP has no Join and its ZeroRedundancyOptimizer under Join
// steps stale shards, so the oracle is the single-optimizer window rule) and
// against the ddp strategy. Real worker processes, gloo on 127.0.0.1.
// This file: FULL_SHARD frees each unit's parameters
// between steps, prefetches the next unit in backward, and refuses units
// run in another order.
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
#include "support/multiprocess.h"

// env_int, the Join oracle's model, data and fixtures, fsdp(), ddp(), options()
// (plugins/strategies/fsdp/fsdp_fixture.h).
using namespace lt::testing;

// FULL_SHARD keeps only each unit's chunk between steps: after the first
// window (the canonical one) every declared unit's parameters have no bytes
// at the end of each training step, on a rank that trains and on one that
// ran out of data (2 and 6 batches, Join); after fit the module is whole
// again and the same on every rank.
LT_TEST_WORKER(FsdpFullShardFrees) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  auto model = std::make_shared<JoinNet>(/*units=*/true);
  int64_t checked = 0;
  auto callback = std::make_shared<lt::LambdaCallback>();
  // After each step, on a joined rank too (lockstep Join).
  callback->on_after_optimizer_step_fn = [&](lt::Trainer& trainer, lt::LightningModule& module) {
    if (trainer.global_step() < 2) return;
    for (const auto& p : module.named_parameters()) {
      LT_WORKER_CHECK(p.value().storage().nbytes() == 0, "step ", trainer.global_step(), ": ", p.key(),
                      " holds ", p.value().storage().nbytes(), " bytes between steps");
    }
    ++checked;
  };
  lt::Trainer trainer(options(fsdp(), 2).max_epochs(1).callbacks({callback}));
  trainer.fit(model, rank_loader(rank, rank == 0 ? 2 : 6));
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  LT_WORKER_CHECK(checked == 5, "checked ", checked, " steps of 6");  // rank 0 joined after 2 (lockstep)
  const torch::Tensor params = model->flat();
  const torch::Tensor all = fsdp()->all_gather(params);
  LT_WORKER_CHECK((all - all[0]).abs().max().item<double>() == 0.0 && params.abs().sum().item<double>() > 0,
                  "after fit the module is not whole and alike");
  return 0;
}

TEST(FsdpFullShard, ParametersHoldNoBytesBetweenStepsAndTheModuleIsWholeAfterFit) {
  expect_workers_pass("FsdpFullShardFrees", 2, std::chrono::seconds(60));
}

// Backward prefetch (BACKWARD_PRE, the default): when unit b's gradients
// start (a hook on b's output, which runs after the strategy's), unit a's
// gather is already under way, so a's parameters have their bytes; with NONE
// they have none until a's own gradients start. Both end with the same
// weights, on a rank that trains and on one that joined (3 and 5 batches).
class ThreeUnitNet : public lt::LightningModule {
 public:
  ThreeUnitNet() {
    torch::manual_seed(0);
    a = register_module("a", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    b = register_module("b", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    c = register_module("c", lt::FSDPUnit<torch::nn::Linear>(3, 1));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    torch::Tensor h = b(torch::tanh(a(batch.data.to(torch::kFloat))));
    if (h.requires_grad()) {
      h.register_hook([this](const torch::Tensor& grad) {
        if (global_step() >= 1) a_whole_at_b.push_back(a->parameters()[0].storage().nbytes() > 0);
        return grad;
      });
    }
    return torch::mse_loss(c(torch::tanh(h)), batch.target.to(torch::kFloat));
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  lt::FSDPUnit<torch::nn::Linear> a{nullptr}, b{nullptr}, c{nullptr};
  std::vector<bool> a_whole_at_b;  // from the second step on (after the canonical window)
};

LT_TEST_WORKER(FsdpBackwardPrefetch) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  std::vector<torch::Tensor> weights;
  for (const auto prefetch : {lt::BackwardPrefetch::kBackwardPre, lt::BackwardPrefetch::kNone}) {
    fsdp()->options().backward_prefetch(prefetch);
    auto model = std::make_shared<ThreeUnitNet>();
    lt::Trainer trainer(options(fsdp(), 2).max_epochs(1));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    const bool pre = prefetch == lt::BackwardPrefetch::kBackwardPre;
    const auto& seen = model->a_whole_at_b;
    LT_WORKER_CHECK(!seen.empty() && std::all_of(seen.begin(), seen.end(), [&](bool whole) { return whole == pre; }),
                    pre ? "BACKWARD_PRE" : "NONE", ": unit a's parameters ", pre ? "had no bytes" : "had bytes",
                    " when unit b's gradients started (", seen.size(), " backward passes)");
    std::vector<torch::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape(-1));
    weights.push_back(torch::cat(flat));
  }
  fsdp()->options().backward_prefetch(lt::BackwardPrefetch::kBackwardPre).sharding_strategy(
      lt::ShardingStrategy::kShardGradOp);
  LT_WORKER_CHECK(torch::equal(weights[0], weights[1]), "BACKWARD_PRE and NONE end with other weights: ",
                  (weights[0] - weights[1]).abs().max().item<double>());
  return 0;
}

TEST(FsdpFullShard, BackwardPrefetchGathersTheNextUnitAheadAndChangesNoValue) {
  expect_workers_pass("FsdpBackwardPrefetch", 2, std::chrono::seconds(60));
}

// A model whose units run in another order after the first steps (here: in
// reverse from batch 3 on) is stopped with an error naming the units, on
// every rank, before the collective that would not match.
class OrderFlippingNet : public lt::LightningModule {
 public:
  OrderFlippingNet() {
    a = register_module("a", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    b = register_module("b", lt::FSDPUnit<torch::nn::Linear>(3, 3));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
    torch::Tensor x = batch.data.to(torch::kFloat);
    x = batch_idx < 3 ? b(a(x)) : a(b(x));
    return x.pow(2).mean();
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  lt::FSDPUnit<torch::nn::Linear> a{nullptr};
  lt::FSDPUnit<torch::nn::Linear> b{nullptr};
};

LT_TEST_WORKER(FsdpUnitOrderChange) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  try {
    lt::Trainer trainer(options(fsdp(), 2).max_epochs(1));
    trainer.fit(std::make_shared<OrderFlippingNet>(), rank_loader(rank, 5));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("the all_gather of unit 'b' where every earlier micro-batch had the all_gather of "
                              "unit 'a'") != std::string::npos,
                    "unexpected error: ", what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the order change was not refused");
  return 1;
}

TEST(FsdpFullShard, UnitsRunInAnotherOrderAreRefusedNamingThem) {
  expect_workers_pass("FsdpUnitOrderChange", 2, std::chrono::seconds(60));
}
