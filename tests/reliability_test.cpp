// No lost work: a checkpoint save killed at any moment leaves the previous
// checkpoint loadable; a truncated or corrupt ckpt_path is a clear error; files
// written are not world-writable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/seeding.h"

extern char** environ;

using lt::testing::read_file;

namespace {

namespace fs = std::filesystem;

// Saves {"step": i, "payload": full(i)} to LT_CKPT_PATH forever.
LT_TEST_WORKER(SaveCheckpointsForever) {
  const std::string path = lt::testing::env_str("LT_CKPT_PATH");
  for (int64_t i = 1;; ++i) {
    lt::StateDict ckpt = lt::new_state_dict();
    ckpt.insert("step", i);
    ckpt.insert("payload", torch::full({512, 1024}, static_cast<float>(i)));  // 2 MiB: saves take a while
    lt::atomic_pickle_save(ckpt, path);
  }
  return 0;
}

// Starts this binary running the worker `name` (stdout and stderr to
// `output`, if given; with `terminal`, on a new pseudo-terminal whose master
// end is stored there, as a program started from a shell).
pid_t start_worker(const std::string& name, const std::map<std::string, std::string>& env,
                   const std::string& output = {}, int* terminal = nullptr) {
  std::vector<std::string> strings;
  for (char** e = environ; *e; ++e) strings.emplace_back(*e);
  strings.push_back("LT_TEST_WORKER=" + name);
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string exe = lt::self_executable();
  const pid_t pid = terminal != nullptr ? forkpty(terminal, nullptr, nullptr, nullptr) : fork();
  if (pid == 0) {
    if (!output.empty() && terminal == nullptr) {
      const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    char* argv[] = {const_cast<char*>(exe.c_str()), nullptr};
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  return pid;
}

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("lt_reliability_" + std::to_string(getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

TEST(Checkpoint, KillDuringSaveAlwaysLeavesAGoodCheckpoint) {
  TempDir dir;
  const std::string path = (dir.path / "last.ckpt").string();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delay_ms(0, 300);
  int64_t previous_step = 0;
  for (int round = 0; round < 8; ++round) {
    const auto round_start = fs::file_time_type::clock::now();
    const pid_t pid = start_worker("SaveCheckpointsForever", {{"LT_CKPT_PATH", path}});
    // Wait for this round's first completed save (process start-up takes a
    // while), then kill at a random moment of the following saves.
    auto saved_this_round = [&] {
      std::error_code ec;
      return fs::exists(path, ec) && fs::last_write_time(path, ec) >= round_start;
    };
    bool saved = false;
    for (int i = 0; i < 600 && !saved; ++i) {
      saved = saved_this_round();
      if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(saved) << "round " << round << ": the worker completed no save within 30 s";
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round;
    // What is there now was written in this round: a save the kill interrupted left no trace.
    EXPECT_TRUE(saved_this_round()) << "round " << round;
    auto loaded = lt::pickle_load_file(path).toGenericDict();
    const int64_t step = loaded.at("step").toInt();
    auto payload = loaded.at("payload").toTensor();
    EXPECT_EQ(payload.sizes(), (std::vector<int64_t>{512, 1024})) << "round " << round;
    EXPECT_TRUE(torch::equal(payload, torch::full({512, 1024}, static_cast<float>(step)))) << "round " << round;
    EXPECT_GE(step, 1) << "round " << round;  // each round's worker counts from 1
    previous_step = step;
    const auto mode = fs::status(path).permissions();
    EXPECT_EQ(mode & fs::perms::others_write, fs::perms::none);
    EXPECT_EQ(mode & fs::perms::group_write, fs::perms::none);
  }
  EXPECT_GT(previous_step, 0);
}

class Tiny : public lt::LightningModule {
 public:
  Tiny() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override { return torch::mse_loss(fc(b.data), b.target); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.1);
  }
  torch::nn::Linear fc{nullptr};
};

std::string fit_error(const std::string& ckpt_path) {
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({8, 2}), torch::randn({8, 1})), lt::DataLoaderOptions(4));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2));
  try {
    trainer.fit(std::make_shared<Tiny>(), data, nullptr, ckpt_path);
  } catch (const lt::ValueError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Checkpoint, TruncatedOrCorruptCkptPathIsAClearError) {
  TempDir dir;
  const std::string good = (dir.path / "good.ckpt").string();
  {
    auto data = std::make_shared<lt::DataLoader>(
        std::make_shared<lt::TensorDataset>(torch::randn({8, 2}), torch::randn({8, 1})), lt::DataLoaderOptions(4));
    auto model = std::make_shared<Tiny>();
    class SaveAtEnd : public lt::Callback {
     public:
      explicit SaveAtEnd(std::string p) : path_(std::move(p)) {}
      std::string name() const override { return "save_at_end"; }
      void on_train_end(lt::Trainer& t, lt::LightningModule&) override { t.save_checkpoint(path_); }
      std::string path_;
    };
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).callbacks({std::make_shared<SaveAtEnd>(good)}));
    trainer.fit(model, data);
  }
  ASSERT_TRUE(fs::exists(good));

  const std::string truncated = (dir.path / "truncated.ckpt").string();
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, fs::file_size(good) / 2);
  std::string msg = fit_error(truncated);
  EXPECT_NE(msg.find("checkpoint '" + truncated + "' is truncated or corrupt"), std::string::npos) << msg;

  const std::string garbage = (dir.path / "garbage.ckpt").string();
  {
    std::ofstream out(garbage);
    out << "this is not a checkpoint";
  }
  msg = fit_error(garbage);
  EXPECT_NE(msg.find("checkpoint '" + garbage + "' is truncated or corrupt"), std::string::npos) << msg;

  msg = fit_error((dir.path / "missing.ckpt").string());
  EXPECT_NE(msg.find("does not exist or cannot be read"), std::string::npos) << msg;
}

}  // namespace

namespace {

// -- SIGINT/SIGTERM: stop at the next step boundary, checkpoint, exit -----------

class RaiseSignalAt : public lt::Callback {
 public:
  RaiseSignalAt(int64_t batch, int times) : batch_(batch), times_(times) {}
  std::string name() const override { return "raise_signal"; }
  void on_before_backward(lt::Trainer&, lt::LightningModule&, const torch::Tensor&) override {
    if (++calls_ == batch_ + 1) {
      for (int i = 0; i < times_; ++i) raise(SIGTERM);
    }
  }
  void on_exception(lt::Trainer&, lt::LightningModule&, const std::exception& e) override { exception = e.what(); }
  int64_t batch_;
  int times_;
  int64_t calls_ = 0;
  std::string exception;
};

TEST(Signals, SigtermStopsAtTheStepBoundaryAndCheckpoints) {
  TempDir dir;
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({40, 2}), torch::randn({40, 1})), lt::DataLoaderOptions(4));
  auto signal_cb = std::make_shared<RaiseSignalAt>(/*batch=*/4, /*times=*/1);
  // accumulate 2: the signal arrives in batch 4 (window [4, 6)), the run stops after batch 5's step.
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(2).default_root_dir(
      dir.path.string()).callbacks({signal_cb}));
  torch::manual_seed(0);
  try {
    trainer.fit(std::make_shared<Tiny>(), data);
    FAIL() << "expected lt::Interrupted";
  } catch (const lt::Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    // Where the run is and how to resume it: a stop on request, not a failure.
    const std::string ckpt = (fs::absolute(dir.path) / "interrupted.ckpt").lexically_normal().string();
    EXPECT_EQ(e.checkpoint(), ckpt);
    EXPECT_EQ(std::string(e.what()), "training interrupted by signal 15 at epoch 0, global step 3; stopped on request: " +
                                         ckpt + " holds the run; resume it with ckpt_path=" + ckpt);
  }
  EXPECT_EQ(signal_cb->exception, "training interrupted by signal 15 at epoch 0, global step 3");
  auto ckpt = lt::pickle_load_file((dir.path / "interrupted.ckpt").string()).toGenericDict();
  EXPECT_EQ(ckpt.at("global_step").toInt(), 3);
  EXPECT_EQ(ckpt.at("epoch").toInt(), 0);
  EXPECT_EQ(ckpt.at("epoch_iteration").toInt(), 6);  // mid-epoch: batches [0, 6) of 10 are done
  // Resumed from it, the run ends with the weights of one never interrupted.
  auto run = [&](int seed, const std::string& ckpt_path) {
    torch::manual_seed(seed);
    auto model = std::make_shared<Tiny>();
    lt::Trainer t(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(2).default_root_dir(dir.path.string()));
    t.fit(model, data, nullptr, ckpt_path);
    EXPECT_EQ(t.global_step(), 15);
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto straight = run(0, "");
  const auto resumed = run(7, (dir.path / "interrupted.ckpt").string());
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(straight[i].equal(resumed[i])) << "parameter " << i;
  // The handlers are gone after fit: the default action is back.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

LT_TEST_WORKER(SecondSignalExitsAtOnce) {
  auto data = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({40, 2}), torch::randn({40, 1})), lt::DataLoaderOptions(4));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).default_root_dir(lt::testing::env_str("LT_DIR")).callbacks(
      {std::make_shared<RaiseSignalAt>(1, 2)}));
  trainer.fit(std::make_shared<Tiny>(), data);
  return 0;  // not reached
}

TEST(Signals, SecondSignalExitsAtOnceWithoutCheckpoint) {
  TempDir dir;
  lt::testing::WorkerOptions options;
  options.env["LT_DIR"] = dir.path.string();
  auto r = lt::testing::run_workers("SecondSignalExitsAtOnce", 1, options);
  EXPECT_EQ(r.exits[0].exit_code, 128 + SIGTERM) << r.summary();
  EXPECT_FALSE(fs::exists(dir.path / "interrupted.ckpt"));
}

}  // namespace

// -- DDP: a failure on one rank is reported by every rank, and nothing hangs ----------

namespace {

// Rank 1's batch 3 (sample 25, which only rank 1 draws) has a dimension too many.
class BadBatchDataset : public lt::TensorDataset {
 public:
  using lt::TensorDataset::TensorDataset;
  lt::Batch get_batch(const std::vector<int64_t>& indices) const override {
    lt::Batch b = lt::TensorDataset::get_batch(indices);
    if (std::find(indices.begin(), indices.end(), 25) != indices.end()) {
      b.data = b.data.unsqueeze(1);
    }
    return b;
  }
};

// Two ranks over TCPStore + gloo (process_group_timeout 3 s), 64 samples in
// batches of 4 (8 per rank), with one fault chosen by LT_SCENARIO:
//   hang      rank 1 sleeps 60 s in its training step at batch 2
//   uneven    uneven_inputs pad (no Join); limit_train_batches 3 on rank 0, 6 on rank 1
//   stop      uneven_inputs pad; rank 0 alone sets should_stop after its batch 2
//   bad_data  rank 1's batch 3 has the wrong shape
LT_TEST_WORKER(FaultyDdpRun) {
  const std::string scenario = lt::testing::env_str("LT_SCENARIO");
  const int rank = lt::testing::env_int("RANK");
  struct Model : Tiny {
    bool hang = false;
    torch::Tensor training_step(const lt::Batch& b, int64_t batch_idx) override {
      if (hang && batch_idx == 2) std::this_thread::sleep_for(std::chrono::seconds(60));
      return Tiny::training_step(b, batch_idx);
    }
  };
  torch::manual_seed(0);
  auto model = std::make_shared<Model>();
  model->hang = scenario == "hang" && rank == 1;
  auto x = torch::randn({64, 2}), y = torch::randn({64, 1});
  auto dataset = scenario == "bad_data" ? std::make_shared<BadBatchDataset>(x, y)
                                        : std::make_shared<lt::TensorDataset>(x, y);
  auto ddp_options = lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(3));
  if (scenario == "uneven" || scenario == "stop") ddp_options.uneven_inputs(lt::UnevenInputs::kPad);
  auto options = lt::TrainerOptions()
                     .strategy(std::make_shared<lt::DDPStrategy>(ddp_options))
                     .devices(2)
                     .max_epochs(1)
                     .enable_progress_bar(false)
                     .default_root_dir(lt::testing::env_str("LT_DIR"));
  if (scenario == "uneven") options.limit_train_batches(rank == 0 ? 3 : 6);
  if (scenario == "stop" && rank == 0) {
    auto stop = std::make_shared<lt::LambdaCallback>();
    stop->on_train_batch_end_fn = [](lt::Trainer& t, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                                     int64_t batch_idx) {
      if (batch_idx == 2) t.set_should_stop(true);
    };
    options.callbacks({stop});
  }
  lt::Trainer trainer(options);
  try {
    trainer.fit(model, std::make_shared<lt::DataLoader>(dataset, lt::DataLoaderOptions(4)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit failed: %s\n", e.what());
    return 1;
  }
  return 0;
}

// A DDP strategy whose rank 1 fails at its N-th step before training
// (LT_FAIL_AT=N): each collective the run issues before on_fit_start (the
// DataModule's prepare_data barrier, the log folder's agreement, the loaders'
// balancing, the Join check) and the gradient sync's set-up (the parameters'
// broadcast) is one step. LT_FAIL_AT=0 fails nowhere and prints the count.
class FailingDDP : public lt::DDPStrategy {
 public:
  FailingDDP(lt::DDPStrategyOptions options, int64_t fail_at) : DDPStrategy(options), fail_at_(fail_at) {}
  torch::Tensor reduce(const torch::Tensor& t, lt::ReduceOp op) override {
    step("reduce");
    return DDPStrategy::reduce(t, op);
  }
  torch::Tensor all_gather(const torch::Tensor& t) override {
    step("all_gather");
    return DDPStrategy::all_gather(t);
  }
  std::vector<std::string> all_gather_bytes(const std::string& bytes) override {
    step("all_gather_bytes");
    return DDPStrategy::all_gather_bytes(bytes);
  }
  torch::Tensor broadcast(const torch::Tensor& t, int64_t src) override {
    step("broadcast");
    return DDPStrategy::broadcast(t, src);
  }
  void barrier(const std::string& name) override {
    step(("barrier " + name).c_str());
    DDPStrategy::barrier(name);
  }
  bool reduce_boolean_decision(bool decision, bool all) override {
    step("reduce_boolean_decision");
    return DDPStrategy::reduce_boolean_decision(decision, all);
  }
  int64_t steps = 0;
  bool armed = true;  // until on_fit_start

 protected:
  std::unique_ptr<lt::GradientSync> make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                       const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                       std::function<bool()> stop_wish) override {
    step("gradient sync set-up");
    return DDPStrategy::make_gradient_sync(std::move(module), group, std::move(stop_wish));
  }

 private:
  void step(const char* what) {
    if (!armed) return;
    ++steps;
    if (fail_at_ == 0 && global_rank() == 0) std::printf("pre-run step %lld: %s\n", static_cast<long long>(steps), what);
    if (global_rank() == 1 && steps == fail_at_) {
      throw lt::Error(c10::str("injected failure in ", what, " (pre-run step ", steps, ")"));
    }
  }
  int64_t fail_at_;
};

LT_TEST_WORKER(PreRunFailure) {
  struct Data : lt::DataModule {
    void prepare_data() override {}
    void setup(lt::Stage) override {
      std::printf("data module: rank %lld of %lld\n", static_cast<long long>(global_rank()),
                  static_cast<long long>(world_size()));
    }
    std::shared_ptr<lt::DataLoader> train_dataloader() override {
      return std::make_shared<lt::DataLoader>(
          std::make_shared<lt::TensorDataset>(torch::randn({16, 2}), torch::randn({16, 1})), lt::DataLoaderOptions(4));
    }
  };
  auto strategy = std::make_shared<FailingDDP>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(5)),
                                               lt::testing::env_int("LT_FAIL_AT"));
  auto started = std::make_shared<lt::LambdaCallback>();
  started->on_fit_start_fn = [strategy](lt::Trainer&, lt::LightningModule&) {
    strategy->armed = false;
    std::printf("pre-run steps: %lld\n", static_cast<long long>(strategy->steps));
  };
  auto model = std::make_shared<Tiny>();
  lt::Trainer trainer(lt::TrainerOptions()
                          .strategy(strategy)
                          .devices(2)
                          .max_epochs(1)
                          .enable_progress_bar(false)
                          .callbacks({started})
                          .default_root_dir(lt::testing::env_str("LT_DIR")));
  try {
    trainer.fit(model, std::make_shared<Data>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit failed: %s\n", e.what());
    std::printf("module detached: %s\n",
                trainer.module() == nullptr && lt::detail::ModuleAccess::runtime(*model).state == nullptr ? "yes" : "no");
    return 1;
  }
  return 0;
}

lt::testing::WorkersResult run_faulty(const std::string& scenario, const std::string& dir) {
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"LT_SCENARIO", scenario}, {"LT_DIR", dir}};
  return lt::testing::run_workers("FaultyDdpRun", 2, options);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The run's lifecycle: every collective before training is inside its error
// path. Rank 1 fails at each of them in turn; every time rank 1 keeps its own
// error, rank 0 reports it once (naming rank 1), both end, and the module
// is detached on each rank that returned.
TEST(Watchdog, AFailureInEachPreRunCollectiveIsReportedOnEveryRank) {
  TempDir dir;
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"LT_FAIL_AT", "0"}, {"LT_DIR", dir.path.string()}};
  auto clean = lt::testing::run_workers("PreRunFailure", 2, options);
  ASSERT_TRUE(clean.ok()) << clean.summary();
  // A DataModule learns its rank before setup (per-rank data).
  EXPECT_TRUE(contains(clean.outputs[0], "data module: rank 0 of 2")) << clean.outputs[0];
  EXPECT_TRUE(contains(clean.outputs[1], "data module: rank 1 of 2")) << clean.outputs[1];
  const auto at = clean.outputs[0].find("pre-run steps: ");
  ASSERT_NE(at, std::string::npos) << clean.outputs[0];
  const int steps = std::stoi(clean.outputs[0].substr(at + 15));
  // The DataModule's prepare_data barrier, the log folder's agreement, the parameters' broadcast, the Join
  // check's batch counts (join needs no balancing collective).
  ASSERT_EQ(steps, 4) << clean.outputs[0];
  for (const char* step : {"pre-run step 1: barrier prepare_data", "pre-run step 2: all_gather_bytes",
                           "pre-run step 3: gradient sync set-up", "pre-run step 4: reduce"}) {
    EXPECT_TRUE(contains(clean.outputs[0], step)) << clean.outputs[0];
  }
  for (int n = 1; n <= steps; ++n) {
    options.env["LT_FAIL_AT"] = std::to_string(n);
    auto r = lt::testing::run_workers("PreRunFailure", 2, options);
    EXPECT_EQ(r.exits[1].exit_code, 1) << "step " << n << "\n" << r.summary();
    EXPECT_TRUE(contains(r.outputs[1], "fit failed: injected failure in ")) << "step " << n << "\n" << r.outputs[1];
    EXPECT_TRUE(contains(r.outputs[1], "module detached: yes")) << "step " << n << "\n" << r.outputs[1];
    EXPECT_EQ(r.exits[0].exit_code, 1) << "step " << n << "\n" << r.summary();
    const std::string& out0 = r.outputs[0];
    size_t reports = 0;
    for (size_t p = out0.find("cause: rank 1 failed"); p != std::string::npos;
         p = out0.find("cause: rank 1 failed", p + 1)) {
      ++reports;
    }
    EXPECT_EQ(reports, 1u) << "step " << n << "\n" << out0;
    EXPECT_TRUE(contains(out0, "injected failure in ")) << "step " << n << "\n" << out0;
    // Rank 0 either returned from fit (then detached) or was ended by its watchdog.
    if (contains(out0, "fit failed: ")) EXPECT_TRUE(contains(out0, "module detached: yes")) << out0;
  }
}

TEST(Watchdog, AHungRankIsNamedByEveryRankAndAllExitNonZero) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto r = run_faulty("hang", dir.path.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string& out0 = r.outputs[0];
  const std::string& out1 = r.outputs[1];
  EXPECT_EQ(r.exits[0].exit_code, 1) << r.summary();
  EXPECT_TRUE(r.exits[1].exit_code == 1 || r.exits[1].signal != 0) << r.summary();
  // Rank 0 timed out in the gradient allreduce of step 2 and says rank 1 never came.
  EXPECT_TRUE(contains(out0, "collective backward (gradient allreduce) failed on rank 0 of 2 at epoch 0, global "
                             "step 2, batch 2 (of 8) after the process group timeout of 3 s"))
      << out0;
  EXPECT_TRUE(contains(out0, "rank 1: not in a collective for")) << out0;
  EXPECT_TRUE(contains(out0, "ranks that did not arrive: 1")) << out0;
  EXPECT_TRUE(contains(out0, "uneven inputs are not the cause: Join handles them in this run")) << out0;
  // Rank 1, stuck in its own code, is ended by its watchdog with the same report.
  EXPECT_TRUE(contains(out1, "rank 1 of 2 stops: another rank failed while this rank was busy in its own code"))
      << out1;
  EXPECT_TRUE(contains(out1, "rank 0: failed at epoch 0, global step 2, batch 2 of 8: in backward")) << out1;
  EXPECT_TRUE(contains(out1, "ranks that did not arrive: 1")) << out1;
  EXPECT_LT(seconds, 30.0);  // the 3 s timeout, the 2 s check-in, start-up; not the 60 s sleep
}

// Batch counts that differ where the loaders cannot even them out (limits
// per rank) are refused on every rank at the epoch's start, naming them.
TEST(Watchdog, UnevenInputsWithoutJoinAreRefusedAtTheEpochStart) {
  TempDir dir;
  auto r = run_faulty("uneven", dir.path.string());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.exits[rank].exit_code, 0) << r.summary();
    EXPECT_TRUE(contains(r.outputs[rank], "uneven inputs without Join (uneven_inputs: pad or error): the ranks have "
                                          "different numbers of training batches this epoch (rank 0: 3, rank 1: 6)"))
        << r.outputs[rank];
  }
}

// A rank that leaves the epoch early by itself (a rank-local should_stop)
// leaves the other in an allreduce with no partner: the watchdog names it.
TEST(Watchdog, ARankThatStopsAloneWithoutJoinIsNamedAsTheLikelyCause) {
  TempDir dir;
  auto r = run_faulty("stop", dir.path.string());
  const std::string& out0 = r.outputs[0];
  const std::string& out1 = r.outputs[1];
  EXPECT_NE(r.exits[0].exit_code, 0) << r.summary();
  EXPECT_NE(r.exits[1].exit_code, 0) << r.summary();
  // Rank 1's fourth allreduce has no partner: rank 0 stopped and waits at the end of fit.
  EXPECT_TRUE(contains(out1, "collective backward (gradient allreduce) failed on rank 1 of 2 at epoch 0, global "
                             "step 3, batch 3 (of 8)"))
      << out1;
  EXPECT_TRUE(contains(out1, "rank 0: finished the run at epoch 1, global step 3")) << out1;
  EXPECT_TRUE(contains(out1, "likely cause: uneven inputs without Join")) << out1;
  EXPECT_TRUE(contains(out0, "rank 0 of 2 finished the run, but another rank failed")) << out0;
  EXPECT_TRUE(contains(out0, "likely cause: uneven inputs without Join")) << out0;
}

TEST(BadData, OneRanksBadBatchStopsEveryRankWithTheStepBatchAndShapes) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto r = run_faulty("bad_data", dir.path.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string shapes =
      "data [4, 1, 2] Float, target [4, 1] Float; the epoch's first batch had data [4, 2] Float";
  EXPECT_TRUE(r.exits[1].exit_code == 1 || r.exits[1].terminated) << r.summary();
  EXPECT_TRUE(contains(r.outputs[1], "bad batch at epoch 0, batch 3 (global step 3, rank 1): " + shapes))
      << r.outputs[1];
  // Rank 0 was waiting for rank 1 in a collective: it names rank 1's error, not just a closed connection.
  EXPECT_TRUE(r.exits[0].exit_code == 1) << r.summary();
  EXPECT_TRUE(contains(r.outputs[0], "rank 1: failed at epoch 0, global step 3, batch 3 of 8: bad batch"))
      << r.outputs[0];
  EXPECT_TRUE(contains(r.outputs[0], shapes)) << r.outputs[0];
  EXPECT_TRUE(contains(r.outputs[0], "cause: rank 1 failed")) << r.outputs[0];
  EXPECT_LT(seconds, 30.0);  // not the process group timeout's doing alone
}

}  // namespace

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
  // A stop on request, said as one: every rank names the checkpoint, the supervisor the exit code.
  EXPECT_NE(r.output.find("lightning-cpp: strategy ddp: stopped on request"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exited with code"), std::string::npos) << r.output;
  const std::string resume = "resume it with ckpt_path=" + (fs::absolute(dir.path) / "interrupted.ckpt").string();
  for (const char* log : {"rank0.log", "rank1.log"}) {  // the workers' output (worker_log_dir)
    const std::string text = read_file(dir.path / "logs" / log);
    EXPECT_NE(text.find(resume), std::string::npos) << log << ":\n" << text;
  }
  const int64_t step0 = read_step(dir.path / "stopped0"), step1 = read_step(dir.path / "stopped1");
  EXPECT_GT(step0, 3) << r.output;
  EXPECT_EQ(step0, step1) << "the ranks stopped at different steps";
  auto ckpt = lt::pickle_load_file((dir.path / "interrupted.ckpt").string()).toGenericDict();
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
  auto ckpt = lt::pickle_load_file((stopped / "interrupted.ckpt").string()).toGenericDict();
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
  const auto b = run(resumed, (stopped / "interrupted.ckpt").string());
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
  EXPECT_TRUE(fs::exists(dir.path / "interrupted.ckpt")) << r.output;
}

// A closed terminal (SIGHUP) stops the run as SIGTERM does, and the
// supervisor removes the rendezvous directory.
TEST(Signals, SighupStopsGracefullyAndRemovesTheRendezvousDirectory) {
  TempDir dir;
  auto r = supervise(dir.path, "join", [](pid_t supervisor, int) { kill(supervisor, SIGHUP); });
  ASSERT_TRUE(r.exited_in_time) << r.output;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == lt::kExitStoppedOnRequest) << r.output;
  EXPECT_EQ(read_step(dir.path / "stopped0"), read_step(dir.path / "stopped1"));
  EXPECT_TRUE(fs::exists(dir.path / "interrupted.ckpt")) << r.output;
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
