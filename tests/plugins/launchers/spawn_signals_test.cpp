// plugins/launchers' local spawn under signals: SIGTERM/SIGINT to the
// launcher stop every rank at one step with rank 0's checkpoint (resumed, it
// equals an uninterrupted run), Ctrl-C on a terminal and SIGHUP stop it
// gracefully, a SIGKILLed worker ends every process naming the rank, and
// nothing listens beyond 127.0.0.1.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/reliability_fixture.h"

using lt::testing::read_file;
using namespace lt::testing::reliability;  // TempDir, Tiny, start_worker, contains (reliability_fixture.h)

// -- local spawn: signals to the launcher, a killed worker, what listens -------------------

namespace {

// The local addresses of this process's listening TCP sockets (from /proc/net/tcp{,6}).
std::vector<std::string> listening_addresses() {
  std::set<std::string> inodes;
  for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode) != 0) out.push_back(local.substr(0, local.find(':')));
    }
  }
  return out;
}

// Runs as the supervisor of a local spawn (devices 2, no rank variables) and
// again in each worker: a slow fit (10 ms per step, 50 epochs) to be
// interrupted. Each worker writes <dir>/pid<rank>; at global step 3 it writes
// <dir>/listen<rank> (its listening addresses) and rank 0 writes <dir>/started.
// A worker stopped by a signal writes <dir>/stopped<rank> with its global step.
// The inputs are uneven: LT_UNEVEN=join: rank 0 has 5 batches per epoch, rank
// 1 has 8 (Join); pad: 63 samples, so the sampler pads rank 1's shard.
// LT_MAX_EPOCHS, LT_FAST (no sleep) and LT_RESUME (a ckpt_path) make the
// same run resumed or uninterrupted; one that ends writes its parameters to
// <dir>/weights.
LT_TEST_WORKER(SpawnedSlowRun) {
  const fs::path dir = lt::testing::env_str("LT_DIR");
  struct Slow : Tiny {
    fs::path dir;
    bool fast = false;
    torch::Tensor training_step(const lt::Batch& b, int64_t batch_idx) override {
      if (!fast) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!fast && global_step() == 3 && batch_idx == 3) {
        std::ofstream listen(dir / ("listen" + std::to_string(global_rank())));
        for (const auto& address : listening_addresses()) listen << address << "\n";
        listen.close();
        if (global_rank() == 0) std::ofstream(dir / "started") << "1";
      }
      return Tiny::training_step(b, batch_idx);
    }
  };
  torch::manual_seed(0);
  auto model = std::make_shared<Slow>();
  model->dir = dir;
  model->fast = lt::testing::env_int("LT_FAST") != 0;
  if (std::getenv("RANK") != nullptr) std::ofstream(dir / ("pid" + lt::testing::env_str("RANK"))) << ::getpid();
  const bool pad = lt::testing::env_str("LT_UNEVEN") == "pad";
  auto ddp_options = lt::DDPStrategyOptions()
                         .process_group_timeout(std::chrono::seconds(10))
                         .worker_log_dir((dir / "logs").string());
  if (pad) ddp_options.uneven_inputs(lt::UnevenInputs::kPad);
  auto options = lt::TrainerOptions()
                     .strategy(std::make_shared<lt::DDPStrategy>(ddp_options))
                     .devices(2)
                     .max_epochs(lt::testing::env_int("LT_MAX_EPOCHS", 50))
                     .enable_progress_bar(false)
                     .default_root_dir(dir.string());
  if (!pad) options.limit_train_batches(lt::testing::env_int("RANK") == 0 ? 5 : 8);
  lt::Trainer trainer(options);
  const int64_t samples = pad ? 63 : 64;
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({samples, 2}), torch::randn({samples, 1})),
      lt::DataLoaderOptions(4));
  try {
    // The supervisor launches, waits and exits here.
    trainer.fit(model, data, nullptr, lt::testing::env_str("LT_RESUME"));
    if (trainer.is_global_zero() && std::getenv("RANK") != nullptr) {
      std::vector<torch::Tensor> weights;
      for (const auto& p : model->parameters()) weights.push_back(p.detach());
      lt::atomic_pickle_save(c10::List<torch::Tensor>(weights), (dir / "weights").string());
    }
  } catch (const lt::Interrupted& e) {
    std::ofstream(dir / ("stopped" + lt::testing::env_str("RANK"))) << trainer.state().global_step;
    std::fprintf(stderr, "%s\n", e.what());
    return lt::kExitStoppedOnRequest;  // as the examples do
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit failed: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Processes (other than this one) whose environment holds `token`.
int count_processes_with(const std::string& token) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos || std::stoi(name) == getpid()) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string environment((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (environment.find(token) != std::string::npos) ++n;
  }
  return n;
}

struct Supervised {
  int status = -1;
  bool exited_in_time = false;
  std::string output;
};

// Starts SpawnedSlowRun as a supervisor (with `on_terminal`, on a
// pseudo-terminal), waits for <dir>/started, calls `act` with the
// supervisor's pid and the terminal's master end (-1 without one), and
// waits up to 40 s for the supervisor.
Supervised supervise(const fs::path& dir, const std::string& uneven, const std::function<void(pid_t, int)>& act,
                     bool on_terminal = false) {
  const std::string run_id = std::to_string(getpid()) + "_" + dir.filename().string();
  int terminal = -1;
  const pid_t supervisor = start_worker("SpawnedSlowRun",
                                        {{"LT_DIR", dir.string()}, {"LT_UNEVEN", uneven}, {"LT_RUN_TOKEN", run_id}},
                                        (dir / "supervisor.log").string(), on_terminal ? &terminal : nullptr);
  const std::string token = "LT_RUN_TOKEN=" + run_id;
  Supervised out;
  // What the supervisor writes on its terminal (read, so that it never blocks on a full one).
  std::string screen;
  if (terminal >= 0) ::fcntl(terminal, F_SETFL, ::fcntl(terminal, F_GETFL) | O_NONBLOCK);
  auto drain = [&] {
    char buffer[4096];
    for (ssize_t n; terminal >= 0 && (n = ::read(terminal, buffer, sizeof(buffer))) > 0;) screen.append(buffer, n);
  };
  for (int i = 0; i < 1200 && !fs::exists(dir / "started"); ++i) {
    drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(fs::exists(dir / "started")) << read_file(dir / "supervisor.log") << screen;
  act(supervisor, terminal);
  for (int i = 0; i < 800 && !out.exited_in_time; ++i) {
    drain();
    out.exited_in_time = waitpid(supervisor, &out.status, WNOHANG) == supervisor;
    if (!out.exited_in_time) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!out.exited_in_time) {
    kill(supervisor, SIGKILL);
    waitpid(supervisor, &out.status, 0);
  }
  drain();
  if (terminal >= 0) ::close(terminal);
  out.output = read_file(dir / "supervisor.log") + screen;
  // The supervisor and its workers are all gone: nothing with our token remains.
  EXPECT_EQ(count_processes_with(token), 0);
  return out;
}

// Where a stop on request writes its checkpoint: the run's version folder (the default logger's).
fs::path interrupted_ckpt(const fs::path& dir) { return dir / "lightning_logs" / "version_0" / "interrupted.ckpt"; }

int64_t read_step(const fs::path& path) {
  std::ifstream in(path);
  int64_t step = -1;
  in >> step;
  return step;
}

class SignalToLauncher : public ::testing::TestWithParam<std::string> {};

TEST_P(SignalToLauncher, EveryRankStopsAtOneStepAndRankZeroCheckpoints) {
  TempDir dir;
  auto r = supervise(dir.path, GetParam(), [](pid_t supervisor, int) { kill(supervisor, SIGTERM); });
  ASSERT_TRUE(r.exited_in_time) << r.output;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == lt::kExitStoppedOnRequest) << r.output;
  // A stop on request, said as one: every rank names the checkpoint, rank 0 alone how to resume, the
  // supervisor (named as the program it is) the exit code.
  EXPECT_NE(r.output.find(lt::program_name() + ": strategy ddp: stopped on request"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exited with code"), std::string::npos) << r.output;
  const std::string ckpt_path = fs::absolute(interrupted_ckpt(dir.path)).lexically_normal().string();
  for (const char* log : {"rank0.log", "rank1.log"}) {  // the workers' output (worker_log_dir)
    const std::string text = read_file(dir.path / "logs" / log);
    EXPECT_NE(text.find(ckpt_path + " holds the run"), std::string::npos) << log << ":\n" << text;
    const bool resume_line = text.find("resume it with ckpt_path=" + ckpt_path) != std::string::npos;
    EXPECT_EQ(resume_line, std::string(log) == "rank0.log") << log << ":\n" << text;
  }
  const int64_t step0 = read_step(dir.path / "stopped0"), step1 = read_step(dir.path / "stopped1");
  EXPECT_GT(step0, 3) << r.output;
  EXPECT_EQ(step0, step1) << "the ranks stopped at different steps";
  auto ckpt = lt::pickle_load_file(interrupted_ckpt(dir.path).string()).toGenericDict();
  EXPECT_EQ(ckpt.at("global_step").toInt(), step0);
  // A local spawn listens on loopback only, if at all (gloo connects its
  // pairs during rendezvous; the store is a file in a private directory). A
  // TCPStore would show here as a listener on 00000000 (every interface).
  for (const char* name : {"listen0", "listen1"}) {
    ASSERT_TRUE(fs::exists(dir.path / name)) << name;
    std::istringstream lines(read_file(dir.path / name));
    std::string address;
    while (lines >> address) {
      EXPECT_TRUE(address == "0100007F" || address == "00000000000000000000000001000000")
          << name << ": a socket listens on " << address << " (hex), not on 127.0.0.1";
    }
  }
}

// Resumed from the interrupted.ckpt of a SIGTERM mid-epoch, the uneven DDP
// run (pad, Join) ends with the weights of one never interrupted.
TEST_P(SignalToLauncher, ResumedFromInterruptedCkptEqualsAnUninterruptedRun) {
  TempDir dir;
  const fs::path stopped = dir.path / "stopped", resumed = dir.path / "resumed", straight = dir.path / "straight";
  for (const auto& d : {stopped, resumed, straight}) fs::create_directories(d);
  auto r = supervise(stopped, GetParam(), [](pid_t supervisor, int) { kill(supervisor, SIGTERM); });
  ASSERT_TRUE(r.exited_in_time && WIFEXITED(r.status) && WEXITSTATUS(r.status) == lt::kExitStoppedOnRequest)
      << r.output;
  const int64_t step = read_step(stopped / "stopped0");
  auto ckpt = lt::pickle_load_file(interrupted_ckpt(stopped).string()).toGenericDict();
  const int64_t per_epoch = 8, max_epochs = 12;
  ASSERT_LT(step, per_epoch * max_epochs) << "stopped too late to compare";
  // Where in its epoch (8 iterations, the longest rank's under Join) the run stopped.
  EXPECT_EQ((ckpt.contains("epoch_iteration") ? ckpt.at("epoch_iteration").toInt() : 0) % per_epoch, step % per_epoch);
  auto run = [&](const fs::path& d, const std::string& ckpt_path) {
    const pid_t pid = start_worker("SpawnedSlowRun",
                                   {{"LT_DIR", d.string()}, {"LT_UNEVEN", GetParam()}, {"LT_FAST", "1"},
                                    {"LT_MAX_EPOCHS", std::to_string(max_epochs)}, {"LT_RESUME", ckpt_path}},
                                   (d / "supervisor.log").string());
    int status = -1;
    bool done = false;
    for (int i = 0; i < 1200 && !(done = waitpid(pid, &status, WNOHANG) == pid); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    EXPECT_TRUE(done && WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(d / "supervisor.log");
    return lt::tensor_list(lt::pickle_load_file((d / "weights").string()));
  };
  const auto a = run(straight, "");
  const auto b = run(resumed, interrupted_ckpt(stopped).string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i << " (stopped at " << step << ")";
}

INSTANTIATE_TEST_SUITE_P(UnevenInputs, SignalToLauncher, ::testing::Values("join", "pad"));

// One Ctrl-C typed on the terminal of a local spawn: the terminal sends
// SIGINT to its foreground process group, the supervisor alone (its workers
// have groups of their own), which forwards it once: a graceful stop.
TEST(Signals, OneCtrlCOnATerminalStopsALocalSpawnGracefully) {
  TempDir dir;
  auto r = supervise(
      dir.path, "join", [](pid_t, int terminal) { ASSERT_EQ(::write(terminal, "\x03", 1), 1); },
      /*on_terminal=*/true);
  ASSERT_TRUE(r.exited_in_time) << r.output;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == lt::kExitStoppedOnRequest) << r.output;
  const int64_t step0 = read_step(dir.path / "stopped0"), step1 = read_step(dir.path / "stopped1");
  EXPECT_GT(step0, 3) << r.output;
  EXPECT_EQ(step0, step1) << "the ranks stopped at different steps";
  EXPECT_TRUE(fs::exists(interrupted_ckpt(dir.path))) << r.output;
}

// A closed terminal (SIGHUP) stops the run as SIGTERM does, and the
// supervisor removes the rendezvous directory.
TEST(Signals, SighupStopsGracefullyAndRemovesTheRendezvousDirectory) {
  TempDir dir;
  auto r = supervise(dir.path, "join", [](pid_t supervisor, int) { kill(supervisor, SIGHUP); });
  ASSERT_TRUE(r.exited_in_time) << r.output;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == lt::kExitStoppedOnRequest) << r.output;
  EXPECT_EQ(read_step(dir.path / "stopped0"), read_step(dir.path / "stopped1"));
  EXPECT_TRUE(fs::exists(interrupted_ckpt(dir.path))) << r.output;
  const size_t at = r.output.find("(store ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const fs::path store = r.output.substr(at + 7, r.output.find(')', at) - at - 7);
  EXPECT_FALSE(fs::exists(store.parent_path())) << store.parent_path() << " is left behind";
}

TEST(RankDeath, SigkillOfAWorkerEndsEveryProcessNamingTheRank) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  double killed_at = 0;
  auto r = supervise(dir.path, "join", [&](pid_t, int) {
    kill(static_cast<pid_t>(read_step(dir.path / "pid1")), SIGKILL);
    killed_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  const double ended_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.exited_in_time) << r.output;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 128 + SIGKILL) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 of 2 was killed by signal 9")) << r.output;
  // Rank 0 reports rank 1 missing from its collective, well within the 10 s timeout.
  const std::string log0 = read_file(dir.path / "logs" / "rank0.log");
  EXPECT_TRUE(contains(log0, "rank 1: did not check in")) << log0;
  EXPECT_TRUE(contains(log0, "ranks that did not arrive: 1")) << log0;
  EXPECT_LT(ended_at - killed_at, 10.0);
}

}  // namespace
