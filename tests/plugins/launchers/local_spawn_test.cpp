// plugins/launchers: the Trainer's local spawn (the supervisor launches the
// workers and exits 0; a crashed worker fails the launch and ends the others;
// an uncreatable worker log folder leaves nothing behind) and the rendezvous
// naming who waited for whom in a stale rank environment.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/strategies/ddp/ddp_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using namespace lt::testing::ddp;  // TinyNet, its data and the workers' options (ddp_fixture.h)

// -- local spawn: the Trainer launches the workers ---------------------------------------

// Runs once as the supervisor (no RANK) and once per worker (the supervisor
// re-executes this binary with the same LT_TEST_WORKER). A worker records
// its pid; LT_CRASH_RANK crashes that rank at its third batch.
LT_TEST_WORKER(LocalSpawn) {
  const int devices = env_int("LT_DEVICES", 2);
  const int crash_rank = env_int("LT_CRASH_RANK", -1);
  struct Crashing : TinyNet {
    int crash_rank;
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      if (global_rank() == crash_rank && batch_idx == 2) std::abort();
      return TinyNet::training_step(batch, batch_idx);
    }
  };
  torch::manual_seed(0);
  auto net = std::make_shared<Crashing>();
  net->crash_rank = crash_rank;
  auto data = make_data(64);
  const std::string dir = env_str("LT_OUT");
  std::shared_ptr<lt::Strategy> strategy;
  if (env_str("LT_STRATEGY") == "fsdp") {
    strategy =
        std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions().process_group_timeout(std::chrono::seconds(60)));
  } else {
    strategy = std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions()
                                                     .process_group_timeout(std::chrono::seconds(60))
                                                     .worker_log_dir(env_str("LT_WORKER_LOG_DIR")));
  }
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(devices)
                          .strategy(strategy)
                          .max_epochs(2)
                          .enable_progress_bar(false)
                          .default_root_dir(dir));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(4).shuffle(true));
  // Only the workers get here before fit's launch; the supervisor has no rank yet.
  if (std::getenv("RANK") != nullptr) {
    std::ofstream(dir + "/pid" + lt::testing::env_str("RANK")) << ::getpid();
  }
  trainer.fit(net, loader);  // in the supervisor: launches, waits, std::exit
  std::vector<torch::Tensor> params = parameter_list(*net);
  torch::save(params, dir + "/rank" + env_str("RANK") + ".pt");
  return 0;
}

namespace {

struct SpawnResult {
  lt::WorkerExit exit;
  std::string output;
  double seconds = 0;
};

// Starts this binary as a supervisor (no rank variables) running LocalSpawn.
SpawnResult run_supervisor(const std::string& dir, std::map<std::string, std::string> env) {
  env["LT_TEST_WORKER"] = "LocalSpawn";
  env["LT_OUT"] = dir;
  lt::WorkerSpec spec;
  spec.argv = {lt::self_executable()};
  spec.env = env;
  spec.output_path = dir + "/supervisor.log";
  // The test binary's own environment has no RANK (ctest does not set one);
  // make sure the supervisor does not inherit one from a caller.
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LT_LOCAL_SPAWN", "MASTER_PORT"}) {
    EXPECT_EQ(std::getenv(k), nullptr) << k << " is set in the test's environment";
  }
  const auto start = std::chrono::steady_clock::now();
  auto exits = lt::launch_and_wait({spec}, lt::LaunchOptions{std::chrono::seconds(90)});
  SpawnResult out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit = exits.at(0);
  std::ifstream in(spec.output_path);
  std::stringstream ss;
  ss << in.rdbuf();
  out.output = ss.str();
  return out;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

// The launch line names the program and the strategy that launches (ddp, and
// fsdp: it said "lightning-cpp: strategy ddp" for both).
TEST(LocalSpawn, SupervisorLaunchesWorkersAndExitsZero) {
  EXPECT_EQ(lt::program_name(), std::filesystem::path(lt::self_executable()).filename().string());
  for (const std::string strategy : {"ddp", "fsdp"}) {
    const std::string dir = out_dir("spawn_ok_" + strategy);
    auto r = run_supervisor(dir, {{"LT_DEVICES", "2"}, {"LT_STRATEGY", strategy}});
    EXPECT_TRUE(r.exit.ok()) << r.exit.describe() << "\n" << r.output;
    // Begun with the program's own name (this test binary's), not the library's.
    EXPECT_NE(r.output.find(lt::program_name() + ": strategy " + strategy + ": launching 2 worker processes"),
              std::string::npos) << r.output;
    if (r.exit.ok()) {
      auto p0 = load_tensors(dir + "/rank0.pt"), p1 = load_tensors(dir + "/rank1.pt");
      expect_equal(p0, p1, "local spawn rank 1 vs rank 0 (" + strategy + ")");
    }
    std::filesystem::remove_all(dir);
  }
}

// A worker_log_dir that cannot be created fails the launch naming it, and
// leaves no rendezvous folder behind in TMPDIR (it was made first).
TEST(LocalSpawn, AnUncreatableWorkerLogDirLeavesNothingBehind) {
  const std::string dir = out_dir("spawn_logdir");
  const std::string tmp = dir + "/tmp";
  std::filesystem::create_directories(tmp);
  auto r = run_supervisor(dir, {{"LT_WORKER_LOG_DIR", "/dev/null/logs"}, {"TMPDIR", tmp}});
  EXPECT_FALSE(r.exit.ok());
  EXPECT_NE(r.output.find("local spawn: worker_log_dir '/dev/null/logs' cannot be created: Not a directory"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "a rendezvous folder was left in " << tmp;
  std::filesystem::remove_all(dir);
}

// A plain run in a shell that still holds RANK=1 WORLD_SIZE=2 MASTER_* from
// an earlier launch: no peer ever comes. The error says who waited for
// whom, where, and the likely cause (it was c10d's bare socket timeout).
LT_TEST_WORKER(StaleEnvironment) {
  lt::Trainer trainer(lt::TrainerOptions().enable_progress_bar(false).default_root_dir(env_str("LT_OUT")).strategy(
      std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(2)))));
  auto data = make_data(8);
  try {
    trainer.fit(make_net(-1), std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                               lt::DataLoaderOptions(4)));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("rendezvous: rank 1 of 2 (") != std::string::npos &&
                        what.find("waited 2 s for the store at 127.0.0.1:" + env_str("MASTER_PORT") +
                                  " that rank 0 hosts") != std::string::npos &&
                        what.find("left in the environment by an earlier launch") != std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "trained without peers");
  return 1;
}

TEST(Rendezvous, AStaleRankEnvironmentSaysWhoWaitedForWhom) {
  const std::string dir = out_dir("stale_env");
  lt::WorkerSpec spec;
  spec.argv = {lt::self_executable()};
  spec.env = {{"LT_TEST_WORKER", "StaleEnvironment"}, {"LT_OUT", dir},           {"RANK", "1"},
              {"WORLD_SIZE", "2"},                    {"LOCAL_RANK", "1"},       {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(lt::find_free_port())}};
  spec.output_path = dir + "/out.log";
  auto exits = lt::launch_and_wait({spec}, lt::LaunchOptions{std::chrono::seconds(60)});
  std::ifstream in(spec.output_path);
  std::stringstream output;
  output << in.rdbuf();
  EXPECT_TRUE(exits.at(0).ok()) << exits.at(0).describe() << "\n" << output.str();
  std::filesystem::remove_all(dir);
}

TEST(LocalSpawn, ACrashedWorkerFailsTheLaunchAndEndsTheOthers) {
  const std::string dir = out_dir("spawn_crash");
  auto r = run_supervisor(dir, {{"LT_DEVICES", "3"}, {"LT_CRASH_RANK", "1"}});
  // The supervisor exits with 128 + SIGABRT, naming rank 1, long before the
  // 60 s process group timeout.
  EXPECT_EQ(r.exit.exit_code, 128 + SIGABRT) << r.exit.describe() << "\n" << r.output;
  EXPECT_NE(r.output.find("rank 1 of 3"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
  // No worker is left behind.
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir + "/pid" + std::to_string(rank));
    pid_t pid = 0;
    ASSERT_TRUE(static_cast<bool>(in >> pid)) << "rank " << rank << " did not start";
    EXPECT_FALSE(process_alive(pid)) << "rank " << rank << " (pid " << pid << ") still runs";
  }
  std::filesystem::remove_all(dir);
}
