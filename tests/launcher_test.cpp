// The subprocess launcher under the multi-process test harness: exit codes
// reach the parent, and one failing worker ends the others long before the
// timeout; the workers' error files.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <lightning_cpp/plugins/launchers/error_file.h>

#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;

// Ranks 0 and 2 leave their pid and exit 0. Rank 1 exits 3 only once the
// launcher has reaped both (their pids are gone), so they ended on their own
// and were not terminated because of rank 1.
LT_TEST_WORKER(ExitWithRank) {
  const std::string dir = env_str("LT_PID_DIR");
  if (env_int("RANK") != 1) {
    std::ofstream(dir + "/pid" + env_str("RANK")) << ::getpid();
    return 0;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (const char* rank : {"0", "2"}) {
    pid_t pid = 0;
    while (pid == 0 || ::kill(pid, 0) == 0 || errno != ESRCH) {
      LT_WORKER_CHECK(std::chrono::steady_clock::now() < deadline, "rank ", rank, " was not reaped within 30 s");
      std::ifstream(dir + "/pid" + rank) >> pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return 3;
}

LT_TEST_WORKER(RankOneCrashesOthersHang) {
  if (env_int("RANK") == 1) std::abort();
  std::this_thread::sleep_for(std::chrono::seconds(120));  // a rank stuck in a collective
  return 0;
}

TEST(Launcher, ExitCodesReachTheParent) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_launcher_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  lt::testing::WorkerOptions options;
  options.env["LT_PID_DIR"] = dir.string();
  auto r = run_workers("ExitWithRank", 3, options);
  std::filesystem::remove_all(dir);
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

// A worker's error file is torchelastic's JSON record: Python's json module
// (as torchrun reads it) and read_error_file give back the message exactly.
TEST(ErrorFile, ARecordReadsBackInPythonAndHere) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_error_file_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string message = "a \"quoted\" C:\\path,\nline two\tand \x01 control, caf\xc3\xa9";
  const std::string path = (dir / "error.json").string();
  std::ofstream(path) << lt::error_file_record(message);
  EXPECT_EQ(lt::read_error_file(path), message);
  const std::string script = "import json,sys; d=json.load(open(sys.argv[1])); int(d['message']['extraInfo']"
                             "['timestamp']); sys.stdout.buffer.write(d['message']['message'].encode())";
  const std::string command = "/usr/bin/python3 -c \"" + script + "\" " + path + " > " + (dir / "out").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(dir / "out", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), message);
  EXPECT_EQ(lt::read_error_file((dir / "missing.json").string()), std::nullopt);
  std::filesystem::remove_all(dir);
}

TEST(ErrorFile, FailuresAreGroupedByMessage) {
  EXPECT_EQ(lt::group_failures({}), "");
  EXPECT_EQ(lt::group_failures({{0, "bad"}, {1, "bad"}, {2, "bad"}}), "error: bad\n");
  EXPECT_EQ(lt::group_failures({{0, "a"}, {1, "b"}, {2, "a"}}), "error: ranks 0, 2: a\nerror: rank 1: b\n");
}
