// The collective watchdog's failure report, from status lines as the ranks
// publish them: the text users read when a DDP run fails, without starting
// processes (tests/plugins/distributed/collective_watchdog_test.cpp checks it end to end).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include <lightning_cpp/plugins/distributed/collective_watchdog.h>

namespace {

using Statuses = std::map<int64_t, std::string>;
constexpr std::chrono::milliseconds kWait{2000};

std::string report(const Statuses& statuses, int64_t world_size, bool join, int64_t rank = 0) {
  return lt::format_watchdog_report("collective X failed on rank 0", statuses, rank, world_size, join, kWait);
}

const std::string kInAllreduce = "collective 0 2 2 8|in backward (gradient allreduce) for 3.1 s (epoch 0, ...)";
const std::string kOwnCode = "own_code 0 2 2 8|not in a collective for 3.1 s (in its own code: ...)";

TEST(WatchdogReport, AHungRankIsListedWithEveryRanksLine) {
  EXPECT_EQ(report({{0, kInAllreduce}, {1, kOwnCode}}, 2, /*join=*/true),
            "collective X failed on rank 0\n"
            "  rank 0: in backward (gradient allreduce) for 3.1 s (epoch 0, ...)\n"
            "  rank 1: not in a collective for 3.1 s (in its own code: ...)\n"
            "ranks that did not arrive: 1\n"
            "uneven inputs are not the cause: Join handles them in this run");
}

TEST(WatchdogReport, AnUnshadowedCollectiveWhileRanksWaitInJoinPointsAtUnevenInputs) {
  const std::string in_join = std::string("collective 0 20 19 20|in ") + lt::kJoinShadowingScope + " for 3.0 s";
  const std::string r =
      report({{0, "collective 0 20 20 21|in allreduce (strategy reduce) for 3.0 s"}, {1, in_join}}, 2, true);
  EXPECT_NE(r.find("likely cause: uneven inputs: rank(s) 1 ran out of data and wait in Join, while rank(s) 0 are in a "
                   "collective that no Join hook shadows"),
            std::string::npos) << r;
  EXPECT_EQ(r.find("not the cause"), std::string::npos) << r;
  // Every rank in Join's own collectives: Join matched them; something else went wrong.
  EXPECT_NE(report({{0, in_join}, {1, in_join}}, 2, true).find("uneven inputs are not the cause"), std::string::npos);
}

TEST(WatchdogReport, ARankThatDidNotCheckInIsNamed) {
  const std::string r = report({{0, kInAllreduce}}, 3, /*join=*/true);
  EXPECT_NE(r.find("  rank 1: did not check in within 2 s (the process died, or cannot reach the store)"),
            std::string::npos) << r;
  EXPECT_NE(r.find("ranks that did not arrive: 1, 2"), std::string::npos) << r;
}

TEST(WatchdogReport, AFinishedRankWithoutJoinPointsAtUnevenInputs) {
  const std::string r =
      report({{0, kInAllreduce}, {1, "finished 0 3 3 3|finished the run at epoch 0, global step 3"}}, 2, false);
  EXPECT_NE(r.find("likely cause: uneven inputs without Join: the ranks ran different numbers of batches (rank(s) 1 "
                   "finished while others still train); use uneven_inputs: join"),
            std::string::npos) << r;
}

TEST(WatchdogReport, RanksInDifferentEpochsWithoutJoinPointAtUnevenInputs) {
  const std::string r = report({{0, kInAllreduce}, {1, "collective 1 9 0 8|in backward for 3.0 s"}}, 2, false);
  EXPECT_NE(r.find("likely cause: uneven inputs without Join: the ranks ran different numbers of batches (they are "
                   "in different epochs)"),
            std::string::npos) << r;
  EXPECT_EQ(r.find("ranks that did not arrive"), std::string::npos) << r;  // both are in a collective
}

TEST(WatchdogReport, APeersOwnFailureIsTheCause) {
  const std::string r = report({{0, "failed_in_collective 0 2 2 8|failed at epoch 0: in barrier: closed"},
                                {1, "failed 0 2 2 8|failed at epoch 0, global step 2: bad batch"}},
                               2, false);
  EXPECT_NE(r.find("cause: rank 1 failed (above); the others stopped with it"), std::string::npos) << r;
  EXPECT_EQ(r.find("likely cause"), std::string::npos) << r;
  EXPECT_EQ(r.find("not the likely cause"), std::string::npos) << r;
}

TEST(WatchdogReport, SameEpochWithoutJoinRulesOutUnevenInputs) {
  const std::string r = report({{0, kInAllreduce}, {1, kOwnCode}}, 2, false);
  EXPECT_NE(r.find("uneven inputs are not the likely cause: every rank that answered is in the same epoch"),
            std::string::npos) << r;
}

}  // namespace
