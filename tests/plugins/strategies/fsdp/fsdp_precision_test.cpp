// 16-mixed's gradient scaler under fsdp (lt::MixedPrecision built by hand: on
// the CPU its CUDA autocast casts nothing and the scaler acts, as on a GPU).
// Each rank unscales only its shards' gradients, so a non-finite value in one
// rank's shard must skip the step on every rank, as PyTorch's
// ShardedGradScaler does: otherwise the ranks' scales and steps part ways.
// Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>

#include <lightning_cpp/lightning.h>
#include <lightning_cpp/plugins/precision/precision.h>

#include "plugins/strategies/fsdp/fsdp_fixture.h"
#include "support/cuda.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // env_int, JoinNet, rank_loader, fsdp(), options() (fsdp_fixture.h)

// At global step 2 rank 0 alone finds an infinity in its shard's gradient
// (put there after backward's reduce-scatter). Every rank skips that step and
// backs off once (65536 -> 32768); the others are taken, and the replicas'
// whole parameters are the same after fit.
LT_TEST_WORKER(FsdpScalerAgrees) {
  const int rank = env_int("RANK");
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    auto model = std::make_shared<JoinNet>(/*units=*/true);
    auto precision = std::make_shared<lt::MixedPrecision>();
    auto callback = std::make_shared<lt::LambdaCallback>();
    callback->on_after_backward_fn = [&](lt::Trainer& trainer, lt::LightningModule& module) {
      if (trainer.global_step() != 2 || rank != 0) return;
      auto& shard = module.optimizer().param_groups()[0].params()[0];
      LT_WORKER_CHECK(shard.grad().defined() && shard.grad().numel() > 0, "rank 0's first shard has no gradient");
      shard.mutable_grad().view({-1})[0].fill_(std::numeric_limits<double>::infinity());
    };
    lt::Trainer trainer(options(fsdp(), 2).max_epochs(1).precision_plugin(precision).callbacks({callback}));
    trainer.fit(model, rank_loader(rank, 5));
    const double scale = precision->scaler().get_scale();
    const torch::Tensor scales = fsdp()->all_gather(torch::tensor({scale}, torch::kDouble)).flatten();
    LT_WORKER_CHECK(scales[0].item<double>() == 32768.0 && scales[1].item<double>() == 32768.0, name_of(sharding),
                    ": every rank should have backed off once from 65536; the ranks' scales: ", scales);
    const torch::Tensor params = model->flat();
    const torch::Tensor all = fsdp()->all_gather(params);
    LT_WORKER_CHECK((all - all[0]).abs().max().item<double>() == 0.0 && torch::isfinite(params).all().item<bool>(),
                    name_of(sharding), ": the replicas differ after fit, or a non-finite step was taken");
    LT_WORKER_CHECK(trainer.global_step() == 5, name_of(sharding), ": global step ", trainer.global_step(),
                    ", expected 5 (a skipped step counts)");
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpPrecision, ANonFiniteGradientInOneRanksShardSkipsTheStepOnEveryRank) {
  expect_workers_pass("FsdpScalerAgrees", 2, std::chrono::seconds(90));
}

// The same on CUDA (16-mixed's own device), two ranks sharing the one GPU over Gloo.
TEST(CudaFsdpPrecision, ANonFiniteGradientInOneRanksShardSkipsTheStepOnEveryRank) {
  LT_SKIP_WITHOUT_CUDA();
  expect_workers_pass_on_one_gpu("FsdpScalerAgrees", 2, std::chrono::seconds(90));
}
