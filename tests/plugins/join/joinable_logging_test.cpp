// plugins/join/joinable_logging.h: log(..., sync_dist=true) under Join
// reduces over the active ranks only, and active ranks logging different
// synced values all throw the same error. Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

// -- Joinable logging ---------------------------------------------------------------------------

// Counts 1, 3, 3: at iteration 2 rank 0 has joined and rank 2 logs a synced
// value rank 1 does not. The header sizes the reduction by the largest
// counts, and the per-value counts show the disagreement: every rank,
// the joined one too, throws the same error (no hang, no gloo abort).
LT_TEST_WORKER(SyncDistMismatchAfterARankJoined) {
  const int rank = env_int("RANK");
  class ExtraLog : public JoinNet {
   public:
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      torch::Tensor loss = JoinNet::training_step(batch, batch_idx);
      if (global_rank() == 2 && batch_idx == 2) log("extra", 1.0, lt::LogOptions().sync_dist(true));
      return loss;
    }
  };
  const std::vector<int64_t> counts = {1, 3, 3};
  lt::Trainer trainer(base_options(make_strategy(), 3));
  std::string error = "<trained>";
  try {
    trainer.fit(std::make_shared<ExtraLog>(), rank_loader(rank, counts[rank]));
  } catch (const lt::Error& e) {
    error = e.what();
  }
  LT_WORKER_CHECK(error.find("log(sync_dist=true) under Join: the active ranks logged different numbers of synced "
                             "values in one micro-batch (up to 2 sum/mean and 0 min/max values)") != std::string::npos,
                  "rank ", rank, ": ", error);
  return 0;
}

TEST(JoinLogging, ActiveRanksLoggingDifferentSyncedValuesAllThrow) {
  expect_workers_pass("SyncDistMismatchAfterARankJoined", 3, std::chrono::seconds(60));
}
LT_TEST_WORKER(JoinSyncDistLogging) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {1, 3, 2};
  auto model = std::make_shared<JoinNet>();
  model->log_value = true;
  lt::Trainer trainer(base_options(make_strategy(), 3));
  trainer.fit(model, rank_loader(rank, counts[rank]));
  // Rank r logs r + 1; the reduction is over the ranks still training.
  const std::vector<std::pair<double, double>> expected = {{2.0, 3.0}, {2.5, 3.0}, {2.0, 2.0}};
  LT_WORKER_CHECK(static_cast<int64_t>(model->logged.size()) == counts[rank]);
  for (size_t i = 0; i < model->logged.size(); ++i) {
    LT_WORKER_CHECK(model->logged[i] == expected[i], "batch ", i, ": mean ", model->logged[i].first, " max ",
                    model->logged[i].second);
  }
  return 0;
}

TEST(JoinLogging, SyncDistMeanAndMaxAreOverTheActiveRanksOnly) {
  expect_workers_pass("JoinSyncDistLogging", 3, std::chrono::seconds(60));
}

// uneven_inputs: join with join_enable: false (even counts): no Join, so
// sync_dist values are reduced as they are logged, over every rank; the
// logging joinable stays out (it was attached and never opened: log threw
// "outside training_step under Join").
LT_TEST_WORKER(SyncDistLoggingWithJoinDisabled) {
  const int rank = env_int("RANK");
  auto model = std::make_shared<JoinNet>();
  model->log_value = true;
  auto strategy = make_strategy();
  strategy->options().join_enable(false);
  lt::Trainer trainer(base_options(strategy, 2));
  trainer.fit(model, rank_loader(rank, 2));
  LT_WORKER_CHECK(model->logged.size() == 2u, "logged ", model->logged.size());
  for (const auto& [mean, max] : model->logged) LT_WORKER_CHECK(mean == 1.5 && max == 2.0, "mean ", mean, " max ", max);
  return 0;
}

TEST(JoinLogging, WithJoinDisabledSyncDistReducesOverEveryRank) {
  expect_workers_pass("SyncDistLoggingWithJoinDisabled", 2, std::chrono::seconds(60));
}
