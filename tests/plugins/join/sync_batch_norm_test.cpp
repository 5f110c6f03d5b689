// plugins/layer_sync/sync_batch_norm.h under Join on uneven ranks against
// tests/fixtures/sync_batch_norm.txt (tests/python/sync_batch_norm_oracle.py):
// one process's batch norm over the union of the ranks' batches. Real worker
// processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/layer_sync/sync_batch_norm.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

// -- SyncBatchNorm under Join ----------------------------------------------------------------------

namespace {

struct SyncBatchNormConfig {
  int ws = 0;
  std::vector<int64_t> counts;
  int64_t k = 1;
  int64_t epochs = 1;
  std::vector<double> params;
};

}  // namespace

// tests/fixtures/sync_batch_norm.txt (tests/python/sync_batch_norm_oracle.py):
// one process's batch norm over the union of the ranks' batches per iteration.
LT_TEST_WORKER(SyncBatchNormUnderJoin) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  auto configs = read_fixture<SyncBatchNormConfig>("sync_batch_norm.txt", [](std::istream& ss, SyncBatchNormConfig& c) {
    std::string counts;
    ss >> c.ws >> counts >> c.k >> c.epochs;
    c.counts = parse_counts(counts);
  });
  auto strategy = make_strategy();
  int ran = 0;
  for (const auto& c : configs) {
    if (c.ws != ws) continue;
    auto model = std::make_shared<SyncNet>();
    lt::Trainer trainer(base_options(strategy, ws).max_epochs(c.epochs).accumulate_grad_batches(c.k));
    trainer.fit(model, rank_loader(rank, c.counts[rank]));
    const torch::Tensor expected = torch::tensor(c.params, torch::kDouble);
    const torch::Tensor got = model->flat();
    LT_WORKER_CHECK(got.sizes() == expected.sizes(), "config ", ran, ": ", got.numel(), " values, fixture ",
                    expected.numel());
    const double diff = (got - expected).abs().max().item<double>();
    LT_WORKER_CHECK(diff < 1e-9, "counts ", c.counts[0], ",", c.counts[1], " k=", c.k, ": max |difference| ", diff,
                    " from one process's batch norm on the union");
    const torch::Tensor all = strategy->all_gather(got);
    LT_WORKER_CHECK((all == all[0]).all().item<bool>(), "config ", ran, ": replicas differ");
    ++ran;
  }
  LT_WORKER_CHECK(ran > 0, "no configuration for ", ws, " ranks in the fixture");
  return 0;
}

TEST(JoinSyncBatchNorm, EqualsOneBatchNormOnTheUnionOnTwoRanks) {
  expect_workers_pass("SyncBatchNormUnderJoin", 2, std::chrono::seconds(90));
}

TEST(JoinSyncBatchNorm, EqualsOneBatchNormOnTheUnionOnThreeRanks) {
  expect_workers_pass("SyncBatchNormUnderJoin", 3, std::chrono::seconds(90));
}
