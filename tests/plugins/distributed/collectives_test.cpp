// plugins/distributed/collectives.h through the DDP strategy, on real worker
// processes over Gloo: the collectives on three ranks, sync_dist validation
// agreeing on every rank, and ranks on one node sharing its CPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/strategies/ddp/ddp_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using namespace lt::testing::ddp;  // TinyNet, its data and the workers' options (ddp_fixture.h)

// -- collectives ------------------------------------------------------------------

LT_TEST_WORKER(Collectives) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  lt::DDPStrategy s(test_strategy_options());
  s.setup_environment(lt::TrainerOptions().devices(world));
  const double x = static_cast<double>(rank + 1);
  const double sum = world * (world + 1) / 2.0;
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kSum).item<double>() == sum, "sum");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMean).item<double>() == sum / world, "mean");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMin).item<double>() == 1.0, "min");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMax).item<double>() == static_cast<double>(world), "max");
  LT_WORKER_CHECK(s.reduce(torch::tensor(rank + 1), lt::ReduceOp::kMean).item<double>() == sum / world, "integer mean");
  auto gathered = s.all_gather(torch::full({2}, rank));
  LT_WORKER_CHECK(gathered.sizes() == torch::IntArrayRef({world, 2}), "all_gather shape");
  for (int64_t r = 0; r < world; ++r) LT_WORKER_CHECK(gathered[r][1].item<int64_t>() == r, "all_gather value");
  LT_WORKER_CHECK(s.broadcast(torch::tensor({rank * 10}), 1).item<int64_t>() == 10, "broadcast");
  s.barrier("test");
  LT_WORKER_CHECK(s.reduce_boolean_decision(true, true), "all true");
  LT_WORKER_CHECK(!s.reduce_boolean_decision(rank == 0, true), "all with one false");
  LT_WORKER_CHECK(s.reduce_boolean_decision(rank == 0, false), "any with one true");
  LT_WORKER_CHECK(!s.reduce_boolean_decision(false, false), "any all false");
  bool refused = false;
  try {
    s.all_gather(torch::zeros({rank + 1}));
  } catch (const lt::Error&) {
    refused = true;
  }
  LT_WORKER_CHECK(refused, "all_gather of different shapes must throw on every rank");
  return 0;
}

// Ranks on one node share its CPUs (Lightning's _set_num_threads_if_needed):
// where OMP_NUM_THREADS is not set, a rank whose LibTorch would run 4 threads
// (a machine's default is one per core) runs at most CPUs / ranks; where it is
// set, the user's count stays.
LT_TEST_WORKER(RanksShareTheCpus) {
  const int64_t world = env_int("WORLD_SIZE");
  const bool user_set = env_int("RANK") == 1;
  if (!user_set) ::unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(4);
  lt::DDPStrategy s(test_strategy_options());
  s.setup_environment(lt::TrainerOptions().devices(world));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  LT_WORKER_CHECK(::sched_getaffinity(0, sizeof cpus, &cpus) == 0, "sched_getaffinity");
  const int share = std::max<int>(1, CPU_COUNT(&cpus) / static_cast<int>(world));
  const int expected = user_set ? 4 : std::min(4, share);
  LT_WORKER_CHECK(at::get_num_threads() == expected, "threads ", at::get_num_threads(), ", expected ", expected);
  return 0;
}

TEST(Ddp, RanksOnANodeShareItsCpus) {
  lt::testing::WorkerOptions options;
  options.rank_env = {{}, {{"OMP_NUM_THREADS", "4"}}};
  auto r = run_workers("RanksShareTheCpus", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Ddp, CollectivesOnThreeRanks) {
  auto r = run_workers("Collectives", 3);
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Validation with sync_dist: every rank ends with the same (global) value.
LT_TEST_WORKER(SyncDistValidation) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  auto data = make_data(30);  // 30 / 3 ranks = 10 each, batches of 4: 3 batches each
  auto net = make_net(-1);
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(std::make_shared<lt::DDPStrategy>(test_strategy_options()))
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(4));
  auto metrics = trainer.validate(net, loader);
  const double mine = metrics.at("val_loss");
  auto all = trainer.strategy().all_gather(torch::tensor({mine}, torch::kDouble)).flatten();
  for (int64_t r = 0; r < world; ++r) {
    LT_WORKER_CHECK(all[r].item<double>() == mine, "val_loss differs from rank ", r);
  }
  return 0;
}

TEST(Ddp, SyncDistValidationAgreesOnEveryRank) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("syncdist")}};
  auto r = run_workers("SyncDistValidation", 3, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
}
