// A run's end and its start across ranks: the rank that hosts the store
// (rank 0's TCPStore, as under SLURM, MPI or a manual launch) leaves last, so
// a run that succeeded exits 0 on every rank, also many at once on a loaded
// machine; a store lost after a rank's own success is a warning, not an
// error; and ranks that differ in what shapes their collectives (an option,
// the model) are refused on every rank before the first step, naming it.
// Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/plugins/distributed/rank_agreement.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/reliability_fixture.h"

using namespace lt::testing::reliability;  // TempDir, Tiny, contains (reliability_fixture.h)
using lt::testing::env_int;
using lt::testing::env_str;

namespace {

lt::TrainerOptions short_ddp_fit(int world, const std::string& dir) {
  return lt::TrainerOptions()
      .strategy(std::make_shared<lt::DDPStrategy>(
          lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(20))))
      .devices(world)
      .max_epochs(1)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .default_root_dir(dir);
}

// A two-step DDP fit on WORLD_SIZE ranks. Rank 0, the store's host, reaches
// the run's end last (LT_HOST_DELAY_MS in on_train_end, while the others
// already poll the store) and ends its process the moment fit returns, or
// ends it in on_train_end with exit code 0 (LT_HOST_EXITS=1), taking the
// store with it.
LT_TEST_WORKER(EndsTogether) {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  torch::manual_seed(0);
  auto model = std::make_shared<Tiny>();
  auto x = torch::randn({8 * world, 2}), y = torch::randn({8 * world, 1});
  auto host = std::make_shared<lt::LambdaCallback>();
  host->on_train_end_fn = [rank](lt::Trainer&, lt::LightningModule&) {
    if (rank != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(env_int("LT_HOST_DELAY_MS")));
    if (env_int("LT_HOST_EXITS") == 1) {
      std::fflush(nullptr);
      std::_Exit(0);
    }
  };
  auto options = short_ddp_fit(world, env_str("LT_DIR") + "/job" + env_str("LT_JOB", "0")).callbacks({host});
  lt::Trainer trainer(options);
  trainer.fit(model, std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                                      lt::DataLoaderOptions(4)));
  std::printf("rank %d: fit returned\n", rank);
  // The store's host ends its process at once (no destructors): the others must be done with the store.
  std::fflush(nullptr);
  if (rank == 0) std::_Exit(0);
  return 0;
}

lt::testing::WorkersResult ends_together(const std::string& dir, int world, int jobs, int host_delay_ms,
                                         bool host_exits) {
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(120);
  options.jobs = jobs;
  options.env = {{"LT_DIR", dir},
                 {"LT_HOST_DELAY_MS", std::to_string(host_delay_ms)},
                 {"LT_HOST_EXITS", host_exits ? "1" : "0"}};
  return lt::testing::run_workers("EndsTogether", world, options);
}

// 8 ranks, two runs at a time, five times: every rank of every run exits 0
// (the store's host waits until every rank has seen the end; before, a rank
// still polling the store when rank 0 left aborted with "lost the store").
TEST(RunEnd, ManyRunsOfEightRanksTwoAtATimeEveryRankExitsZero) {
  TempDir dir;
  for (int round = 0; round < 5; ++round) {
    auto r = ends_together(dir.path.string(), 8, 2, 200, false);
    ASSERT_TRUE(r.ok()) << "round " << round << ":\n" << r.summary();
    for (const std::string& out : r.outputs) {
      EXPECT_TRUE(contains(out, "fit returned")) << out;
      EXPECT_FALSE(contains(out, "terminate called")) << out;
      EXPECT_FALSE(contains(out, "lost the store")) << out;
    }
  }
}

// The store's host ends its process right after its own success: the others,
// whose parts succeeded too, warn that they lost the store and exit 0.
TEST(RunEnd, AStoreLostAfterARanksOwnSuccessIsAWarning) {
  TempDir dir;
  auto r = ends_together(dir.path.string(), 3, 1, 300, true);
  ASSERT_TRUE(r.ok()) << r.summary();
  for (int rank = 1; rank < 3; ++rank) {
    const std::string& out = r.outputs[rank];
    EXPECT_TRUE(contains(out, "warning: rank " + std::to_string(rank) + " of 3 finished the run, but lost the store"))
        << out;
    EXPECT_TRUE(contains(out, "fit returned")) << out;
  }
}

// Two ranks that differ in one thing (LT_CASE): rank 1 accumulates 3 batches
// a step (accumulate), or has a wider model (model). Each prints the error it
// gets and exits 2 (bad input), or 0 if the run went through.
LT_TEST_WORKER(Disagreeing) {
  const int rank = env_int("RANK");
  const std::string what = env_str("LT_CASE");
  torch::manual_seed(0);
  auto model = std::make_shared<Tiny>();
  if (what == "model" && rank == 1) model->fc = model->replace_module("fc", torch::nn::Linear(2, 3));
  auto x = torch::randn({32, 2}), y = torch::randn({32, 1});
  auto options = short_ddp_fit(2, env_str("LT_DIR"));
  if (what == "accumulate" && rank == 1) options.accumulate_grad_batches(3);
  lt::Trainer trainer(options);
  try {
    trainer.fit(model, std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                                        lt::DataLoaderOptions(4)));
  } catch (const lt::ValueError& e) {
    std::printf("refused: %s\n", e.what());
    return 2;
  }
  return 0;
}

lt::testing::WorkersResult disagreeing(const std::string& dir, const std::string& what) {
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"LT_DIR", dir}, {"LT_CASE", what}};
  return lt::testing::run_workers("Disagreeing", 2, options);
}

// Each rank exits 2 (bad input), but one the launcher stopped once another had
// exited 2 (after printing its refusal).
void expect_refused(const lt::testing::WorkersResult& r, int rank) {
  EXPECT_TRUE(r.exits[rank].exit_code == 2 || (r.exits[rank].terminated && r.exits[1 - rank].exit_code == 2))
      << r.summary();
}

// Before, the accumulation's mismatch ended after the process group's timeout
// as a failed gradient allreduce that said nothing of accumulation.
TEST(RankAgreement, AnOptionThatDiffersIsRefusedOnEveryRankBeforeTheFirstStep) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto r = disagreeing(dir.path.string(), "accumulate");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int rank = 0; rank < 2; ++rank) {
    expect_refused(r, rank);
    EXPECT_TRUE(contains(r.outputs[rank], "refused: the ranks disagree before the first step (nothing has run): 1 "
                                          "value differs"))
        << r.outputs[rank];
    EXPECT_TRUE(contains(r.outputs[rank], "trainer.accumulate_grad_batches: 1 on rank 0; 3 on rank 1"))
        << r.outputs[rank];
  }
  EXPECT_LT(seconds, 15.0) << "refused by the check, not by the 20 s process group timeout";
}

TEST(RankAgreement, AModelThatDiffersIsRefusedNamingTheParametersAndShapes) {
  TempDir dir;
  auto r = disagreeing(dir.path.string(), "model");
  for (int rank = 0; rank < 2; ++rank) {
    expect_refused(r, rank);
    EXPECT_TRUE(contains(r.outputs[rank], "model parameter fc.weight: [1, 2] Float on rank 0; [3, 2] Float on rank 1"))
        << r.outputs[rank];
    EXPECT_TRUE(contains(r.outputs[rank], "model parameter fc.bias: [1] Float on rank 0; [3] Float on rank 1"))
        << r.outputs[rank];
  }
}

TEST(RankAgreement, TheSameRunOnEveryRankPasses) {
  TempDir dir;
  auto r = disagreeing(dir.path.string(), "none");
  EXPECT_TRUE(r.ok()) << r.summary();
}

// What the refusal says, from the ranks' values (no processes): each value
// that differs, its values and the ranks holding each; a value a rank lacks.
TEST(RankAgreement, TheRefusalNamesEachValueItsValuesAndTheirRanks) {
  const lt::OptionValues base = {{"trainer.max_steps", "10"}, {"precision", "32-true"}};
  lt::OptionValues other = {{"trainer.max_steps", "12"}, {"precision", "32-true"}};
  lt::OptionValues extra = base;
  extra.emplace_back("model parameter w", "[2] Float");
  EXPECT_EQ(lt::describe_disagreement({base, base, base}), "");
  const std::string why = lt::describe_disagreement({base, base, base, other, base, extra});
  EXPECT_TRUE(contains(why, "2 values differ")) << why;
  EXPECT_TRUE(contains(why, "trainer.max_steps: 10 on ranks 0-2, 4-5; 12 on rank 3")) << why;
  EXPECT_TRUE(contains(why, "model parameter w: (none) on ranks 0-4; [2] Float on rank 5")) << why;
  EXPECT_FALSE(contains(why, "precision")) << why;
  // The same values in another order (parameters registered in another order).
  const lt::OptionValues swapped = {{"precision", "32-true"}, {"trainer.max_steps", "10"}};
  EXPECT_TRUE(contains(lt::describe_disagreement({base, swapped}), "in another order")) << "order";
}

}  // namespace
