#pragma once
// Starting worker processes and watching them (Lightning's
// _SubprocessScriptLauncher, but the parent only supervises): each worker is
// a fresh exec of a program with its own environment. If any worker fails or
// the timeout passes, the others are terminated (SIGTERM, then SIGKILL after
// a grace period), so a failure never leaves ranks hanging in a collective.
// Workers get PR_SET_PDEATHSIG, so they also die if the supervisor is killed.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/plugins/launchers/launcher.h>

namespace lt {

struct WorkerSpec {
  std::vector<std::string> argv;             // argv[0] is the program path
  std::map<std::string, std::string> env;    // added to (and overriding) this process's environment
  std::string output_path;                   // stdout+stderr go here; empty: inherited
};

struct WorkerExit {
  int exit_code = -1;     // valid if signal == 0
  int signal = 0;         // the signal that ended it, if any
  bool timed_out = false; // still running at the timeout, then killed
  bool terminated = false; // killed by the supervisor because another worker failed
  bool ok() const { return signal == 0 && exit_code == 0 && !timed_out; }
  // Its fit stopped on request (a signal; core/signals.h): not a failure.
  bool stopped_on_request() const { return signal == 0 && exit_code == kExitStoppedOnRequest && !timed_out; }
  std::string describe() const;
};

struct LaunchOptions {
  std::chrono::milliseconds timeout{0};  // 0: no limit
  std::chrono::milliseconds grace{5000}; // SIGTERM to SIGKILL (a rank's failure report may wait 2 s for check-ins)
};

// Starts every worker, waits for all of them, and returns how each ended.
std::vector<WorkerExit> launch_and_wait(const std::vector<WorkerSpec>& workers, const LaunchOptions& options);

// The running program's path and arguments (from /proc/self).
std::string self_executable();
std::vector<std::string> self_argv();
// A TCP port on 127.0.0.1 that was free a moment ago.
int find_free_port();

// Signals the launcher forwards to its workers (SIGINT/SIGTERM) while
// launch_and_wait runs; the second one kills them at once.
void install_forwarding_signal_handlers();

// -- the local spawn ------------------------------------------------------------------
struct LocalSpawnOptions {
  // Kill the workers after this long (0: no limit).
  std::chrono::milliseconds timeout{0};
  // Write rank r's stdout+stderr to <dir>/rank<r>.log (empty: the workers
  // share the supervisor's terminal).
  std::string worker_log_dir;
  // Several nodes, Lightning's manual way: the same command on every node
  // with MASTER_ADDR, MASTER_PORT and NODE_RANK set. This node's workers get
  // ranks node_rank * num_processes + i of num_nodes * num_processes and
  // rendezvous at the TCPStore rank 0 hosts at main_address:main_port.
  int64_t num_nodes = 1;
  int64_t node_rank = 0;
  std::string main_address;
  int main_port = 0;
  // Who launches, as the launch line names it ("strategy fsdp").
  std::string who = "strategy ddp";
};

// The supervisor of a local spawn (`devices: N` with no cluster launcher):
// re-executes this program (self_argv) `num_processes` times with the local
// environment's variables (LocalEnvironment: LT_LOCAL_SPAWN=1, RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK=0,
// MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port>, and LT_LOCAL_STORE, a
// file in a private 0700 directory it creates and removes), waits for them,
// and then ENDS THE PROCESS with std::exit: 0 when every worker succeeded;
// otherwise, after a line on stderr naming the first worker that failed by
// itself, that worker's exit code, 128 + the signal that killed it, or 124
// when the timeout passed.
[[noreturn]] void supervise_local_spawn(int64_t num_processes, const LocalSpawnOptions& options);

// The Launcher of a local spawn: supervise_local_spawn's.
class SubprocessScriptLauncher : public Launcher {
 public:
  SubprocessScriptLauncher(int64_t num_processes, LocalSpawnOptions options)
      : num_processes_(num_processes), options_(std::move(options)) {}
  [[noreturn]] void launch() override { supervise_local_spawn(num_processes_, options_); }

 private:
  int64_t num_processes_;
  LocalSpawnOptions options_;
};

}  // namespace lt
