// plugins/launchers when workers fail (subprocess_script.h, error_file.h):
// a killed worker's printed lines are not lost, a local spawn prints each
// failure once, and torchrun's failure summary shows each rank's error file.
// The oracle: the messages the TorchrunFit worker prints and raises (LT_FAIL).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>

#include "plugins/environments/torchrun_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::read_file;
// kTorchrun, the launchers and the reference weights (plugins/environments/torchrun_fixture.h).
using namespace lt::testing;

namespace {

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

// A worker's stdout is line-buffered: the lines a rank printed before it
// was killed reach the supervisor's output (a file here), not lost with the
// rank's buffer.
TEST(Failures, AKilledWorkersPrintedLinesAreNotLost) {
  const std::string dir = fresh_dir("fail_killed");
  std::string why;
  EXPECT_FALSE(run_launchers(dir, {{lt::self_executable()}}, {{"LT_MODE", "spawn"}, {"LT_FAIL", "killed"}}, &why));
  EXPECT_NE(why.find("rank 1 trained batch 0\n"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 1 trained batch 1\n"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 0 trained batch 0\n"), std::string::npos) << why;
  EXPECT_TRUE(std::regex_search(why, std::regex("rank 1 of 2 (was killed by signal 9|.*SIGKILL)"))) << why;
  std::filesystem::remove_all(dir);
}

// Every rank of a local spawn fails at the train start: the workers share
// the supervisor's terminal and print nothing; the supervisor prints each
// message once (two copies used to interleave), with its ranks where they
// differ, then the rank that failed first.
TEST(Failures, ALocalSpawnPrintsEachFailureOnce) {
  for (const std::string fail : {"alike", "own"}) {
    const std::string dir = fresh_dir("fail_" + fail);
    std::string why;
    EXPECT_FALSE(run_launchers(dir, {{lt::self_executable()}}, {{"LT_MODE", "spawn"}, {"LT_FAIL", fail}}, &why));
    EXPECT_NE(why.find("exited with code 2"), std::string::npos) << why;
    if (fail == "alike") {
      EXPECT_EQ(count(why, "every rank fails alike"), 1) << why;
      EXPECT_EQ(count(why, "\nerror: every rank fails alike\n"), 1) << why;
    } else {
      for (int rank = 0; rank < 2; ++rank) {
        const std::string line = "\nerror: rank " + std::to_string(rank) + ": rank " + std::to_string(rank) +
                                 " fails its own way\n";
        EXPECT_EQ(count(why, "fails its own way"), 2) << why;
        EXPECT_EQ(count(why, line), 1) << why;
      }
    }
    EXPECT_TRUE(std::regex_search(why, std::regex("rank [01] of 2 exited with code 2; the other workers were stopped")))
        << why;
    std::filesystem::remove_all(dir);
  }
}

// torchrun gives each worker an error file (TORCHELASTIC_ERROR_FILE); its
// failure summary shows what the worker recorded there.
TEST_F(Torchrun, ItsFailureSummaryShowsEachRanksError) {
  const std::string dir = fresh_dir("fail_torchrun");
  std::string why;
  EXPECT_FALSE(run_launchers(dir, {torchrun({"--standalone", "--nproc_per_node", "2", "--log_dir", dir + "/logs"})},
                             {{"LT_FAIL", "own"}}, &why));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(why.find("traceback : rank " + std::to_string(rank) + " fails its own way"), std::string::npos) << why;
  }
  std::filesystem::remove_all(dir);
}
