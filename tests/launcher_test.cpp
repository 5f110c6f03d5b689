// The subprocess launcher under the multi-process test harness: exit codes
// reach the parent, and one failing worker ends the others long before the
// timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::run_workers;

LT_TEST_WORKER(ExitWithRank) {
  if (env_int("RANK") != 1) return 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the others have exited by now
  return 3;
}

LT_TEST_WORKER(RankOneCrashesOthersHang) {
  if (env_int("RANK") == 1) std::abort();
  std::this_thread::sleep_for(std::chrono::seconds(120));  // a rank stuck in a collective
  return 0;
}

TEST(Launcher, ExitCodesReachTheParent) {
  auto r = run_workers("ExitWithRank", 3);
  ASSERT_EQ(r.exits.size(), 3u);
  EXPECT_TRUE(r.exits[0].ok()) << r.summary();
  EXPECT_EQ(r.exits[1].exit_code, 3) << r.summary();
  EXPECT_FALSE(r.ok());
}

TEST(Launcher, OneCrashedWorkerEndsTheOthers) {
  const auto start = std::chrono::steady_clock::now();
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  auto r = run_workers("RankOneCrashesOthersHang", 3, options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exits[1].signal, SIGABRT) << r.summary();
  EXPECT_TRUE(r.exits[0].terminated) << r.summary();
  EXPECT_TRUE(r.exits[2].terminated) << r.summary();
  // Ended by the supervisor after the crash, not by the 60 s timeout.
  EXPECT_LT(elapsed, std::chrono::seconds(30));
}

TEST(Launcher, TimeoutKillsStuckWorkers) {
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(1);
  auto r = run_workers("RankOneCrashesOthersHang", 1, options);  // rank 0 only: sleeps
  EXPECT_TRUE(r.exits[0].timed_out) << r.summary();
}
