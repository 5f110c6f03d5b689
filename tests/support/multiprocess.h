#pragma once
// Multi-process tests: a test starts N processes of its own test binary, each
// running a named worker function with RANK/WORLD_SIZE/LOCAL_RANK and
// MASTER_ADDR=127.0.0.1/MASTER_PORT=<free port> set as torchrun would, and
// bounded by a timeout (lt::launch_and_wait kills the rest when one fails).
//
//   LT_TEST_WORKER(TwoRankAllreduce) { ...; return 0; }   // runs in the workers
//   TEST(Ddp, X) { auto r = lt::testing::run_workers("TwoRankAllreduce", 2); EXPECT_TRUE(r.ok()) << r.summary(); }

#include <chrono>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/plugins/launchers/subprocess_script.h>

namespace lt::testing {

using WorkerFn = std::function<int()>;
bool register_worker(const std::string& name, WorkerFn fn);
// Called by the test main: runs the worker named by LT_TEST_WORKER, if any.
bool is_worker_process();
int run_requested_worker();

struct WorkersResult {
  std::vector<WorkerExit> exits;
  std::vector<std::string> outputs;  // each rank's stdout+stderr
  bool ok() const;
  std::string summary() const;       // per rank: how it ended and the tail of its output
};

struct WorkerOptions {
  std::chrono::seconds timeout{60};
  std::map<std::string, std::string> env;  // extra environment (e.g. per-test parameters)
  // Per-rank extra environment; index = rank.
  std::vector<std::map<std::string, std::string>> rank_env;
  // Independent runs of the world at once (a loaded machine), each with its
  // own MASTER_PORT and LT_JOB=<j>; job j's rank r is result index j * world_size + r.
  int jobs = 1;
};

WorkersResult run_workers(const std::string& name, int world_size, const WorkerOptions& options = {});
// Runs `worker` on `world` ranks, each bounded by `timeout`, with `env`; a
// gtest failure unless every rank passes.
void expect_workers_pass(const std::string& worker, int world, std::chrono::seconds timeout,
                         std::map<std::string, std::string> env = {});

// Helpers for worker bodies.
int env_int(const char* name, int fallback = 0);
std::string env_str(const char* name, const std::string& fallback = {});
// A file's whole text ("" if it cannot be read): worker logs, written files.
std::string read_file(const std::string& path);

// What LT_WORKER_CHECK throws; the worker prints it and exits 1.
class WorkerCheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lt::testing

#define LT_TEST_WORKER(name)                                                                         \
  static int lt_test_worker_##name();                                                                \
  static const bool lt_test_worker_registered_##name =                                               \
      ::lt::testing::register_worker(#name, lt_test_worker_##name);                                  \
  static int lt_test_worker_##name()

// The one way a worker body (or anything it calls) asserts:
//   LT_WORKER_CHECK(steps == 3);
//   LT_WORKER_CHECK(steps == 3, "after epoch ", epoch, ": ", steps);
// A failure ends the worker with exit code 1 after "rank R: check failed:
// COND at FILE:LINE: MESSAGE" on its stderr, which r.summary() shows.
#define LT_WORKER_CHECK(...) LT_WORKER_CHECK_IMPL(__VA_ARGS__, "")
#define LT_WORKER_CHECK_IMPL(cond, ...)                                                                       \
  do {                                                                                                        \
    if (!(cond)) {                                                                                            \
      throw ::lt::testing::WorkerCheckFailure(::c10::str("rank ", ::lt::testing::env_str("RANK", "?"),       \
                                                         ": check failed: ", #cond, " at ", __FILE__, ":",    \
                                                         __LINE__, ": ", __VA_ARGS__));                       \
    }                                                                                                         \
  } while (0)
