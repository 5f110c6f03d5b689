// plugins/distributed/collective_watchdog.h under DDP: a failure on one rank
// (in each pre-run collective, a hung rank, uneven inputs without Join, a rank
// that stops alone, a bad batch) is reported by every rank, naming the rank
// and the cause, and nothing hangs. Real worker processes over Gloo.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/reliability_fixture.h"

using namespace lt::testing::reliability;  // TempDir, Tiny, start_worker, contains (reliability_fixture.h)

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
  // The DataModule's prepare_data barrier, the log folder's agreement, the ranks' check of their options and
  // model (rank_agreement.h), the parameters' broadcast, the Join check's batch counts (join needs no balancing
  // collective).
  ASSERT_EQ(steps, 5) << clean.outputs[0];
  for (const char* step : {"pre-run step 1: barrier prepare_data", "pre-run step 2: all_gather_bytes",
                           "pre-run step 3: reduce", "pre-run step 4: gradient sync set-up",
                           "pre-run step 5: reduce"}) {
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
