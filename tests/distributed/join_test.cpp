// Join, the DDP epoch context under uneven inputs, Joinable logging and the
// Join-compatibility check, in real worker processes over Gloo.
#include <gtest/gtest.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/layer_sync/sync_batch_norm.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/join/epoch_context.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "distributed/flat_allreduce_strategy.h"
#include "distributed/join_oracle.h"
#include "support/multiprocess.h"
#include "support/row_stream.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h)

namespace {

// The process group of a worker, from the torchrun-style environment.
c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(std::chrono::seconds timeout = std::chrono::seconds(20)) {
  const int rank = env_int("RANK");
  const int world_size = env_int("WORLD_SIZE");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
  store_options.isServer = rank == 0;
  store_options.numWorkers = world_size;
  store_options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  return lt::compat::process_group_of(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options),
                                      store, rank, world_size, false);
}

double allreduce_value(c10d::ProcessGroup& pg, double value, c10d::ReduceOp op = c10d::ReduceOp::SUM) {
  std::vector<torch::Tensor> t{torch::full({1}, value, torch::kDouble)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  pg.allreduce(t, options)->wait();
  return t[0].item<double>();
}

// PyTorch's test_join.py AllReducer: each iteration allreduces ones
// `num_allreduces` times; a joined rank's hook shadows with zeros, so each
// result counts the active ranks. Its post hook broadcasts a value from the
// last joiner with the highest rank.
class AllReducer : public lt::Joinable {
 public:
  static constexpr double kBefore = 41;
  static constexpr double kAfter = 42;

  AllReducer(c10::intrusive_ptr<c10d::ProcessGroup> pg, int num_allreduces)
      : pg_(std::move(pg)), num_allreduces_(num_allreduces) {}

  // One iteration of an active rank; returns the sum of the allreduce results.
  double step() {
    auto heartbeat = lt::Join::notify_join_context(*this);
    double total = 0;
    for (int i = 0; i < num_allreduces_; ++i) total += allreduce_value(*pg_, 1.0);
    if (heartbeat) heartbeat->wait();
    heartbeats_ += heartbeat ? 1 : 0;
    return total;
  }

  class Hook : public lt::JoinHook {
   public:
    explicit Hook(AllReducer& owner) : owner_(owner) {}
    void main_hook() override {
      for (int i = 0; i < owner_.num_allreduces_; ++i) allreduce_value(*owner_.pg_, 0.0);
      ++owner_.main_hook_calls_;
    }
    void post_hook(bool is_last_joiner) override {
      owner_.is_last_joiner_ = is_last_joiner;
      const double src = allreduce_value(*owner_.pg_, is_last_joiner ? owner_.pg_->getRank() : -1,
                                         c10d::ReduceOp::MAX);
      std::vector<torch::Tensor> t{torch::full({1}, is_last_joiner ? kAfter : kBefore, torch::kDouble)};
      c10d::BroadcastOptions options;
      options.rootRank = static_cast<int>(src);
      owner_.pg_->broadcast(t, options)->wait();
      owner_.post_value_ = t[0].item<double>();
      ++owner_.post_hook_calls_;
    }

   private:
    AllReducer& owner_;
  };

  std::unique_ptr<lt::JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  torch::Device join_device() const override { return torch::kCPU; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return pg_; }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  int num_allreduces_;
  int64_t heartbeats_ = 0;
  int64_t main_hook_calls_ = 0;
  int64_t post_hook_calls_ = 0;
  bool is_last_joiner_ = false;
  double post_value_ = 0;
};

// Inputs of each rank, from "n0,n1,..." in JOIN_INPUTS.
std::vector<int> inputs_per_rank() {
  std::vector<int> out;
  std::stringstream ss(env_str("JOIN_INPUTS"));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}


}  // namespace

// -- Join with simple joinables (PyTorch's test_join.py, in C++) --------------------------------

LT_TEST_WORKER(JoinAllReducer) {
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  const int num_joinables = env_int("JOIN_NUM_JOINABLES", 1);
  const int num_allreduces = env_int("JOIN_NUM_ALLREDUCES", 1);
  const bool enable = env_int("JOIN_ENABLE", 1) != 0;
  std::vector<std::unique_ptr<AllReducer>> reducers;
  std::vector<lt::Joinable*> joinables;
  for (int j = 0; j < num_joinables; ++j) {
    reducers.push_back(std::make_unique<AllReducer>(pg, num_allreduces));
    joinables.push_back(reducers.back().get());
  }
  double total = 0;
  {
    lt::Join join(joinables, enable);
    for (int i = 0; i < inputs[rank]; ++i) {
      for (auto& r : reducers) total += r->step();
    }
    join.join();
  }
  // Each allreduce of iteration i sums the ranks that still have input i.
  double expected = 0;
  for (int i = 0; i < inputs[rank]; ++i) {
    expected += static_cast<double>(std::count_if(inputs.begin(), inputs.end(), [&](int n) { return n > i; }));
  }
  expected *= num_joinables * num_allreduces;
  LT_WORKER_CHECK(total == expected);
  const int max_inputs = *std::max_element(inputs.begin(), inputs.end());
  for (size_t j = 0; j < reducers.size(); ++j) {
    const AllReducer& r = *reducers[j];
    // Only the first joinable sends the heartbeat.
    LT_WORKER_CHECK(r.heartbeats_ == (enable && j == 0 ? inputs[rank] : 0));
    if (!enable) {
      LT_WORKER_CHECK(r.post_hook_calls_ == 0);
      continue;
    }
    LT_WORKER_CHECK(r.main_hook_calls_ == max_inputs - inputs[rank]);
    LT_WORKER_CHECK(r.post_hook_calls_ == 1);
    LT_WORKER_CHECK(r.is_last_joiner_ == (inputs[rank] == max_inputs));
    LT_WORKER_CHECK(r.post_value_ == AllReducer::kAfter);
    // The config is reset when the context ends.
    LT_WORKER_CHECK(!r.join_config().enable);
  }
  return 0;
}

namespace {
WorkerOptions join_options(const std::string& inputs, std::map<std::string, std::string> extra = {}) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = std::move(extra);
  options.env["JOIN_INPUTS"] = inputs;
  return options;
}
}  // namespace

TEST(Join, MainHooksShadowEveryIterationOfTheActiveRanks) {
  auto r = run_workers("JoinAllReducer", 4, join_options("0,3,5,9", {{"JOIN_NUM_ALLREDUCES", "2"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, OnlyTheFirstJoinableSendsTheHeartbeat) {
  auto r = run_workers("JoinAllReducer", 3, join_options("4,7,2", {{"JOIN_NUM_JOINABLES", "3"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, PostHookRunsOnEveryRankWithTheLastJoinersFlagged) {
  // Two last joiners: the broadcast comes from the higher one.
  auto r = run_workers("JoinAllReducer", 3, join_options("6,2,6"));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, DisabledJoinIsTransparentOnEvenInputs) {
  auto r = run_workers("JoinAllReducer", 2, join_options("5,5", {{"JOIN_ENABLE", "0"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

LT_TEST_WORKER(JoinThrowOnEarlyTermination) {
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  const int min_inputs = *std::min_element(inputs.begin(), inputs.end());
  AllReducer reducer(pg, 1);
  int iterations = 0;
  try {
    lt::Join join({&reducer}, /*enable=*/true, /*throw_on_early_termination=*/true);
    for (int i = 0; i < inputs[rank]; ++i) {
      reducer.step();
      ++iterations;
    }
    join.join();
  } catch (const lt::EarlyTerminationError& e) {
    const std::string what = e.what();
    std::cerr << "rank " << rank << " EarlyTerminationError after " << iterations << ": " << what << std::endl;
    if (inputs[rank] == min_inputs) {
      LT_WORKER_CHECK(what == c10::str("Rank ", rank, " exhausted all inputs."));
    } else {
      LT_WORKER_CHECK(what.find("Detected at least one rank that exhausted inputs") != std::string::npos);
    }
    // Every rank stops at the first iteration some rank does not have.
    LT_WORKER_CHECK(iterations == min_inputs);
    LT_WORKER_CHECK(!reducer.join_config().enable);
    return 0;
  }
  LT_WORKER_CHECK(false, "no EarlyTerminationError");
  return 1;
}

TEST(Join, ThrowOnEarlyTerminationThrowsTheSameTypedErrorOnEveryRank) {
  auto r = run_workers("JoinThrowOnEarlyTermination", 3, join_options("3,5,3"));
  EXPECT_TRUE(r.ok()) << r.summary();
}

LT_TEST_WORKER(JoinWarnsOnSkew) {
  struct Capture {
    std::vector<std::string> messages;
  } capture;
  lt::set_warning_handler([&capture](const std::string& msg) { capture.messages.push_back(msg); });
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  AllReducer reducer(pg, 1);
  lt::Join join({&reducer});
  for (int i = 0; i < inputs[rank]; ++i) reducer.step();
  join.join();
  const bool behind = inputs[rank] + lt::Join::kWarnThreshold + 1 < *std::max_element(inputs.begin(), inputs.end());
  LT_WORKER_CHECK(capture.messages.size() == (behind ? 1u : 0u));
  if (behind) LT_WORKER_CHECK(capture.messages[0].find("uneven input skew of greater than 1000") != std::string::npos);
  return 0;
}

TEST(Join, WarnsOnceWhenARankShadowsMoreThan1000Iterations) {
  auto r = run_workers("JoinWarnsOnSkew", 2, join_options("0,1003"));
  EXPECT_TRUE(r.ok()) << r.summary();
}

// -- The DDP epoch context: uneven inputs through the Trainer ---------------------------------
// Model, data and initial weights as in tests/python/join_oracle.py.

namespace {
struct MatrixConfig {
  int ws = 0;
  std::vector<int64_t> counts;
  int64_t k = 1;
  bool divide = true;
  bool throw_on_early_termination = false;
  int64_t epochs = 1;
  std::string source;
  std::vector<double> params;
  std::string describe() const {
    std::string c;
    for (size_t i = 0; i < counts.size(); ++i) c += c10::str(i ? "," : "", counts[i]);
    return c10::str("ws=", ws, " counts=", c, " k=", k, " divide=", divide, " throw=", throw_on_early_termination,
                    " epochs=", epochs, " (", source, ")");
  }
};


std::vector<MatrixConfig> read_matrix() {
  return read_fixture<MatrixConfig>("join_matrix.txt", [](std::istream& ss, MatrixConfig& c) {
    std::string counts;
    int divide = 0;
    int throw_mode = 0;
    ss >> c.ws >> counts >> c.k >> divide >> throw_mode >> c.epochs >> c.source;
    c.counts = parse_counts(counts);
    c.divide = divide != 0;
    c.throw_on_early_termination = throw_mode != 0;
  });
}

lt::TrainerOptions base_options(const std::shared_ptr<lt::Strategy>& strategy, int ws) {
  return lt::TrainerOptions()
      .strategy(strategy)
      .devices(ws)
      .max_epochs(1)
      .enable_progress_bar(false)
      .num_sanity_val_steps(0)
      .log_every_n_steps(1)
      .default_root_dir(std::filesystem::temp_directory_path().string());
}

// One per worker process: its process group lives as long as the strategy.
std::shared_ptr<lt::DDPStrategy> make_strategy() {
  static auto strategy = std::make_shared<lt::DDPStrategy>(
      lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  return strategy;
}

}  // namespace

// With LT_FLAT_ALLREDUCE=1, the test-only strategy of flat_allreduce_strategy.h
// (the foundation with a gradient sync of its own) instead of DDP.
LT_TEST_WORKER(JoinMatrix) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  std::shared_ptr<lt::Strategy> strategy;
  std::function<void(const lt::JoinSettings&)> set_join;
  if (env_int("LT_FLAT_ALLREDUCE") != 0) {
    static auto flat = std::make_shared<lt::testing::FlatAllreduceStrategy>();
    flat->settings.process_group_timeout = std::chrono::seconds(30);
    set_join = [](const lt::JoinSettings& join) { flat->settings.join = join; };
    strategy = flat;
  } else {
    auto ddp = make_strategy();
    set_join = [ddp](const lt::JoinSettings& join) {
      ddp->options()
          .join_mode(join.mode)
          .join_divide_by_initial_world_size(join.divide_by_initial_world_size)
          .join_throw_on_early_termination(join.throw_on_early_termination);
    };
    strategy = ddp;
  }
  int checked = 0;
  // Plain SGD has no state: PyTorch's Join and lockstep give the same model.
  for (const lt::JoinMode mode : {lt::JoinMode::kLockstep, lt::JoinMode::kPyTorch})
  for (const MatrixConfig& c : read_matrix()) {
    if (c.ws != ws) continue;
    auto model = std::make_shared<JoinNet>();
    set_join({/*enable=*/true, c.throw_on_early_termination, c.divide, mode});
    auto options = base_options(strategy, ws).max_epochs(c.epochs).accumulate_grad_batches(c.k);
    lt::Trainer trainer(options);
    bool threw = false;
    try {
      trainer.fit(model, rank_loader(rank, c.counts[rank]));
    } catch (const lt::EarlyTerminationError& e) {
      threw = true;
    }
    const bool uneven = *std::min_element(c.counts.begin(), c.counts.end()) !=
                        *std::max_element(c.counts.begin(), c.counts.end());
    const torch::Tensor params = model->flat();
    const torch::Tensor expected = torch::tensor(c.params, torch::kDouble);
    const torch::Tensor all = strategy->all_gather(params);
    const double error = (params - expected).abs().max().item<double>();
    const double spread = (all - all[0]).abs().max().item<double>();
    LT_WORKER_CHECK(threw == (c.throw_on_early_termination && uneven) && error <= 1e-6 && spread == 0.0,
                    c.describe(), mode == lt::JoinMode::kPyTorch ? " (pytorch mode)" : " (lockstep)",
                    ": threw=", threw, " error=", error, " spread across ranks=", spread);
    ++checked;
  }
  set_join(lt::JoinSettings{});
  std::cerr << "rank " << rank << ": " << checked << " configurations match the reference" << std::endl;
  LT_WORKER_CHECK(checked > 0, "no configuration for world size ", ws);
  return 0;
}

// -- lockstep Join with stateful optimizers (tests/fixtures/join_lockstep.txt) -------------------


// Each line: lockstep against the window rule with that optimizer, or
// join_mode pytorch against PyTorch DDP + Join (aligned windows only).
LT_TEST_WORKER(JoinLockstepMatrix) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  auto strategy = make_strategy();
  int checked = 0, differ = 0;
  std::map<std::string, torch::Tensor> lockstep_result;
  for (const LockstepConfig& c : read_lockstep()) {
    if (c.ws != ws) continue;
    auto model = std::make_shared<JoinNet>();
    model->optim = c.optim;
    strategy->options()
        .join_mode(c.mode == "pytorch" ? lt::JoinMode::kPyTorch : lt::JoinMode::kLockstep)
        .join_divide_by_initial_world_size(c.divide);
    lt::Trainer trainer(base_options(strategy, ws).max_epochs(c.epochs).accumulate_grad_batches(c.k));
    trainer.fit(model, rank_loader(rank, c.counts[rank]));
    const torch::Tensor params = model->flat();
    const torch::Tensor all = strategy->all_gather(params);
    const double error = (params - torch::tensor(c.params, torch::kDouble)).abs().max().item<double>();
    const double spread = (all - all[0]).abs().max().item<double>();
    LT_WORKER_CHECK(error <= 1e-6 && spread == 0.0, c.describe(), ": error=", error, " spread across ranks=", spread);
    const std::string described = c.describe();
    const std::string key = described.substr(0, described.rfind(' '));  // without the mode
    if (c.mode == "lockstep") lockstep_result[key] = params;
    if (c.mode == "pytorch") differ += (params - lockstep_result.at(key)).abs().max().item<double>() > 1e-9;
    ++checked;
  }
  strategy->options().join_mode(lt::JoinMode::kLockstep).join_divide_by_initial_world_size(true);
  std::cerr << "rank " << rank << ": " << checked << " configurations match; PyTorch's Join differs from lockstep in "
            << differ << std::endl;
  LT_WORKER_CHECK(checked > 0, "no configuration for world size ", ws);
  return 0;
}

TEST(JoinLockstep, StatefulOptimizersOnTwoRanks) {
  expect_workers_pass("JoinLockstepMatrix", 2, std::chrono::seconds(180));
}

TEST(JoinLockstep, StatefulOptimizersOnThreeRanks) {
  expect_workers_pass("JoinLockstepMatrix", 3, std::chrono::seconds(180));
}

TEST(JoinLockstep, StatefulOptimizersOnFourRanks) {
  expect_workers_pass("JoinLockstepMatrix", 4, std::chrono::seconds(180));
}

// -- replica identity ----------------------------------------------------------------------------

// After every optimizer step (before zero_grad), a checksum of the
// parameters, the optimizer's state, the learning rate and global_step.
class ReplicaChecksum : public lt::Callback {
 public:
  std::string name() const override { return "ReplicaChecksum"; }
  void on_before_zero_grad(lt::Trainer& trainer, lt::LightningModule& module,
                           torch::optim::Optimizer& optimizer) override {
    double sum = 0.0;
    for (const auto& p : module.parameters()) sum += p.sum().item<double>();
    for (auto& group : optimizer.param_groups()) {
      sum += 1000.0 * lt::get_lr(group);
      for (auto& p : group.params()) {
        auto it = optimizer.state().find(lt::optimizer_state_key(p));
        if (it == optimizer.state().end()) continue;
        if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
          if (sgd->momentum_buffer().defined()) sum += 7.0 * sgd->momentum_buffer().sum().item<double>();
        } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
          sum += 3.0 * adam->exp_avg().sum().item<double>() + 5.0 * adam->exp_avg_sq().sum().item<double>() +
                 static_cast<double>(adam->step());
        }
      }
    }
    steps.push_back({static_cast<double>(trainer.global_step()), sum});
  }
  std::vector<std::pair<double, double>> steps;
};

// Every rank's sequence of (global_step, checksum), gathered: equal on every rank?
bool replicas_identical(lt::Strategy& strategy, const ReplicaChecksum& probe, int64_t* steps_out) {
  const int64_t n = static_cast<int64_t>(probe.steps.size());
  const torch::Tensor counts = strategy.all_gather(torch::tensor({n}, torch::kLong)).flatten();
  *steps_out = n;
  if (!(counts == n).all().item<bool>()) return false;
  torch::Tensor mine = torch::zeros({n, 2}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    mine[i][0] = probe.steps[i].first;
    mine[i][1] = probe.steps[i].second;
  }
  const torch::Tensor all = strategy.all_gather(mine);
  return (all == all[0]).all().item<bool>();
}

LT_TEST_WORKER(ReplicaIdentity) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {2, 7, 4};
  auto strategy = make_strategy();
  int64_t lockstep_steps = 0, pytorch_steps = 0;
  for (const std::string optim : {"momentum", "adam"}) {
    for (const lt::JoinMode mode : {lt::JoinMode::kLockstep, lt::JoinMode::kPyTorch}) {
      auto model = std::make_shared<JoinNet>();
      model->optim = optim;
      model->step_lr_every = 2;
      auto probe = std::make_shared<ReplicaChecksum>();
      strategy->options().join_mode(mode);
      lt::Trainer trainer(base_options(strategy, 3).max_epochs(2).accumulate_grad_batches(2).callbacks({probe}));
      trainer.fit(model, rank_loader(rank, counts[rank]));
      int64_t steps = 0;
      const bool identical = replicas_identical(*strategy, *probe, &steps);
      if (mode == lt::JoinMode::kLockstep) {
        // 4 windows per epoch (the longest rank: 7 batches, k = 2), 2 epochs, on every rank.
        LT_WORKER_CHECK(identical, optim, ": lockstep replicas differ after some optimizer step");
        LT_WORKER_CHECK(steps == 8 && trainer.global_step() == 8, optim, ": ", steps, " steps, global_step ",
                        trainer.global_step());
        lockstep_steps = steps;
      } else {
        // PyTorch's Join: the rank with 2 batches steps once per epoch; the replicas' states differ.
        LT_WORKER_CHECK(!identical, optim, ": pytorch mode unexpectedly kept the replicas identical");
        pytorch_steps = steps;
      }
    }
  }
  strategy->options().join_mode(lt::JoinMode::kLockstep);
  std::cerr << "rank " << rank << ": lockstep " << lockstep_steps << " steps, pytorch mode " << pytorch_steps
            << std::endl;
  return 0;
}

// The reproductions on 2 ranks with 21 and 20 batches: a Timer with
// interval: step (its per-step collective aborted gloo), and max_steps on a
// step the shorter rank never reaches by itself (20; 41 in epoch 2) with a
// ModelCheckpoint (a rank waited in its barrier). In lockstep the joined rank
// takes those steps, so each ends on every rank at the same global_step.
LT_TEST_WORKER(StepFeaturesOnUnevenRanks) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {21, 20};
  auto strategy = make_strategy();
  {
    auto model = std::make_shared<JoinNet>();
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(86400.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).callbacks({timer}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == 21, "Timer run: global_step ", trainer.global_step());
  }
  {
    // A limit of 0 s: every rank stops after the first step.
    auto model = std::make_shared<JoinNet>();
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(0.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(2).callbacks({timer}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == 1, "Timer 0 s: global_step ", trainer.global_step());
  }
  for (const int64_t max_steps : {20, 41}) {
    auto model = std::make_shared<JoinNet>();
    auto checkpoint = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(env_str("LT_CKPT_DIR")).save_last(true));
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(3).max_steps(max_steps).callbacks({checkpoint}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    LT_WORKER_CHECK(trainer.global_step() == max_steps, "max_steps ", max_steps, ": global_step ",
                    trainer.global_step());
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "max_steps ", max_steps, ": replicas differ");
  }
  // Stops while rank 1 (18 batches of 24) shadows: max_steps 21, and a
  // should_stop that every rank sets after step 20 (on_after_optimizer_step,
  // which a joined rank runs too). Every count is known, so Join is
  // scheduled (no heartbeat): the joined rank must stop shadowing there.
  for (const bool by_callback : {false, true}) {
    const std::vector<int64_t> longer = {24, 18};
    auto model = std::make_shared<JoinNet>();
    auto stopper = std::make_shared<lt::LambdaCallback>();
    stopper->on_after_optimizer_step_fn = [](lt::Trainer& trainer, lt::LightningModule&) {
      if (trainer.global_step() == 20) trainer.set_should_stop(true);
    };
    auto options = base_options(strategy, 2).max_epochs(2);
    if (by_callback) {
      options.callbacks({stopper});
    } else {
      options.max_steps(21);
    }
    lt::Trainer trainer(options);
    trainer.fit(model, rank_loader(rank, longer[rank]));
    const int64_t want = by_callback ? 20 : 21;
    LT_WORKER_CHECK(trainer.global_step() == want, "stop while shadowing (callback ", by_callback, "): global_step ",
                    trainer.global_step(), ", expected ", want);
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "stop while shadowing: replicas differ");
  }
  {
    // PyTorch's Join: the joined rank would not run the Timer's step hook; refused before the first step.
    strategy->options().join_mode(lt::JoinMode::kPyTorch);
    auto timer = std::make_shared<lt::Timer>(
        lt::TimerOptions().duration(std::chrono::duration<double>(86400.0)).interval("step").verbose(false));
    lt::Trainer trainer(base_options(strategy, 2).callbacks({timer}));
    bool refused = false;
    try {
      trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, counts[rank]));
    } catch (const lt::JoinCompatibilityError& e) {
      refused = std::string(e.what()).find("callback Timer") != std::string::npos;
    }
    strategy->options().join_mode(lt::JoinMode::kLockstep);
    LT_WORKER_CHECK(refused, "pytorch mode did not refuse a Timer with interval: step");
  }
  return 0;
}

namespace {

// Validates on its own two batches; records where each validation ran.
class ValidatingNet : public JoinNet {
 public:
  bool has_validation_step() const override { return true; }
  void on_validation_epoch_start() override {
    ++validations;
    points.push_back({static_cast<double>(global_step()), flat().sum().item<double>()});
  }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    log("val_loss", torch::mse_loss(forward(batch.data), batch.target), lt::LogOptions().sync_dist(true));
    log("val_checks", static_cast<double>(validations), lt::LogOptions().sync_dist(true));
  }
  int64_t validations = 0;
  std::vector<std::pair<double, double>> points;  // (global_step, parameter sum) at each validation
};

// Every rank's validation points, gathered: equal on every rank?
bool same_on_every_rank(lt::Strategy& strategy, const std::vector<std::pair<double, double>>& points) {
  torch::Tensor mine = torch::zeros({static_cast<int64_t>(points.size()), 2}, torch::kDouble);
  for (size_t i = 0; i < points.size(); ++i) {
    mine[i][0] = points[i].first;
    mine[i][1] = points[i].second;
  }
  const torch::Tensor all = strategy.all_gather(mine);
  return (all == all[0]).all().item<bool>();
}

}  // namespace

// Mid-epoch validation, step-cadence checkpoints and EarlyStopping after a
// mid-epoch validation, on 2 ranks with 3 and 8 batches: validation points
// are iterations of the longest rank's epoch, and rank 0 (out of data after
// 3) validates, saves and stops there with the others.
LT_TEST_WORKER(MidEpochFeaturesOnUnevenRanks) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {3, 8};
  auto strategy = make_strategy();
  const std::string dir = env_str("LT_CKPT_DIR");
  auto fit = [&](lt::TrainerOptions options, const std::shared_ptr<ValidatingNet>& model) {
    lt::Trainer trainer(std::move(options));
    trainer.fit(model, rank_loader(rank, counts[rank]), rank_loader(rank, 2));
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK((all[0] == all[1]).all().item<bool>(), "replicas differ");
    LT_WORKER_CHECK(same_on_every_rank(*strategy, model->points), "the ranks validated at different points");
    return trainer.global_step();
  };
  {
    // A quarter of 8 batches: after iterations 2, 4, 6 and 8 (the epoch's end), twice; a checkpoint every 2
    // steps (rank 0, out of data after 3 batches, writes them), and a top-2 one on the synced train_loss.
    auto model = std::make_shared<ValidatingNet>();
    auto every = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dir).every_n_train_steps(2).save_top_k(-1).save_last(true));
    auto top = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dir + "/top").monitor("train_loss").every_n_train_steps(3).save_top_k(2));
    const int64_t steps =
        fit(base_options(strategy, 2).max_epochs(2).val_check_interval(0.25).callbacks({every, top}), model);
    LT_WORKER_CHECK(steps == 16 && model->validations == 8, steps, " steps, ", model->validations, " validations");
    LT_WORKER_CHECK(model->points[2].first == 6.0 && model->points[7].first == 16.0, "validated at steps ",
                    model->points[2].first, " and ", model->points[7].first);
    // The last save (step 16, by rank 0) holds the model every rank ends with.
    auto saved = std::make_shared<JoinNet>();
    lt::load_weights(*saved, dir + "/last.ckpt");
    LT_WORKER_CHECK(saved->flat().equal(model->flat()), "last.ckpt differs from the final model");
  }
  {
    // Every 3 batches with accumulate 2: after iteration 3 (mid-window: step 1) and 6 (step 3); 8 is not a
    // multiple of 3, so not at the end. Rank 0 runs the first in its loop, the second joined.
    auto model = std::make_shared<ValidatingNet>();
    const int64_t steps = fit(base_options(strategy, 2).val_check_interval(3).accumulate_grad_batches(2), model);
    LT_WORKER_CHECK(steps == 4 && model->validations == 2, steps, " steps, ", model->validations, " validations");
    LT_WORKER_CHECK(model->points[0].first == 1.0 && model->points[1].first == 3.0, "validated at steps ",
                    model->points[0].first, " and ", model->points[1].first);
  }
  {
    // EarlyStopping stops at the third validation (val_checks 3 > 2.5), after iteration 6: rank 0 has joined.
    auto model = std::make_shared<ValidatingNet>();
    auto stopping = std::make_shared<lt::EarlyStopping>(
        lt::EarlyStoppingOptions("val_checks").mode("max").stopping_threshold(2.5).verbose(false));
    const int64_t steps =
        fit(base_options(strategy, 2).max_epochs(3).val_check_interval(0.25).callbacks({stopping}), model);
    LT_WORKER_CHECK(steps == 6 && model->validations == 3, steps, " steps, ", model->validations, " validations");
  }
  return 0;
}

TEST(JoinLockstep, MidEpochValidationCheckpointsAndEarlyStoppingOnUnevenRanks) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_lockstep_mid_" + std::to_string(::getpid()));
  auto r = run_workers("MidEpochFeaturesOnUnevenRanks", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  const std::vector<std::string> expected = {
      "epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt",  "epoch=0-step=6.ckpt",  "epoch=0-step=8.ckpt",
      "epoch=1-step=10.ckpt", "epoch=1-step=12.ckpt", "epoch=1-step=14.ckpt", "epoch=1-step=16.ckpt",
      "last.ckpt",           "top"};
  EXPECT_EQ(names, expected);
  size_t top = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "top")) top += entry.path().extension() == ".ckpt";
  EXPECT_EQ(top, 2u);
  std::filesystem::remove_all(dir);
}

// A callback's collective in a hook a joined rank does not run (here
// on_train_batch_end) is refused on every rank at the first batch, with the
// way out, before it is issued: no gloo abort, no hang.
class BatchEndReduce : public lt::Callback {
 public:
  std::string name() const override { return "BatchEndReduce"; }
  void on_train_batch_end(lt::Trainer& trainer, lt::LightningModule&, const torch::Tensor& loss, const lt::Batch&,
                          int64_t) override {
    trainer.strategy().reduce(loss);
  }
};

LT_TEST_WORKER(UnmatchedCollectiveRefused) {
  const int rank = env_int("RANK");
  lt::Trainer trainer(base_options(make_strategy(), 2).callbacks({std::make_shared<BatchEndReduce>()}));
  try {
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, rank == 0 ? 2 : 3));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("strategy ddp: reduce issued by callback BatchEndReduce in on_train_batch_end (rank " +
                              std::to_string(rank) + ", epoch 0, batch 0)") != std::string::npos,
                    what);
    LT_WORKER_CHECK(what.find("on_after_optimizer_step") != std::string::npos, what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the unmatched collective was not refused");
  return 1;
}

TEST(JoinLockstep, ACollectiveInAHookJoinedRanksDoNotRunIsRefused) {
  expect_workers_pass("UnmatchedCollectiveRefused", 2, std::chrono::seconds(60));
}

// Mid-epoch checkpoints under DDP resume exactly: lockstep Join on 5 and 8
// batches (one taken while rank 0, which writes it, is joined) and pad on
// even shards; momentum and a per-step scheduler make any slip visible.
// With LT_STREAM=1 each rank's rows are a stream of unknown length (Join only:
// pad needs the counts): the resumed stream skips the batches done.
LT_TEST_WORKER(MidEpochResume) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  const std::string dir = env_str("LT_CKPT_DIR");
  struct Case {
    lt::UnevenInputs uneven;
    std::vector<int64_t> counts;
    std::vector<std::string> resume_from;
  };
  const std::vector<Case> cases = {
      {lt::UnevenInputs::kJoin, {5, 8}, {"epoch=0-step=6.ckpt", "epoch=1-step=12.ckpt"}},
      {lt::UnevenInputs::kPad, {6, 6}, {"epoch=0-step=3.ckpt", "epoch=1-step=9.ckpt"}}};
  for (const Case& c : cases) {
    if (env_int("LT_STREAM") != 0 && c.uneven != lt::UnevenInputs::kJoin) continue;
    strategy->options().uneven_inputs(c.uneven);
    const std::string ckpts = dir + (c.uneven == lt::UnevenInputs::kJoin ? "/join" : "/pad");
    auto run = [&](const std::string& ckpt_path, bool save) {
      auto model = std::make_shared<JoinNet>();
      model->optim = "momentum";
      model->step_lr_every = 2;
      auto options = base_options(strategy, 2).max_epochs(2);
      if (save) {
        options.callbacks({std::make_shared<lt::ModelCheckpoint>(
            lt::ModelCheckpointOptions().dirpath(ckpts).every_n_train_steps(3).save_top_k(-1))});
      }
      lt::Trainer trainer(options);
      trainer.fit(model, rank_loader(rank, c.counts[rank]), nullptr, ckpt_path);
      return model->flat();
    };
    const torch::Tensor straight = run("", /*save=*/true);
    for (const std::string& name : c.resume_from) {
      const torch::Tensor resumed = run(ckpts + "/" + name, /*save=*/false);
      LT_WORKER_CHECK(resumed.equal(straight), name, ": resumed weights differ by ",
                      (resumed - straight).abs().max().item<double>());
    }
  }
  strategy->options().uneven_inputs(lt::UnevenInputs::kJoin);
  return 0;
}

TEST(JoinLockstep, MidEpochCheckpointsResumeExactlyUnderJoinAndPad) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_mid_resume_" + std::to_string(::getpid()));
  auto r = run_workers("MidEpochResume", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

// Read by 3 loader workers: the resumed epoch replays the workers' turns (rank
// 0's 5 batches are 2, 2 and 1 of its workers') to stand at its batch.
TEST(JoinLockstep, MidEpochCheckpointsOfStreamsResumeExactlyUnderJoin) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_mid_resume_stream_" + std::to_string(::getpid()));
  auto r = run_workers(
      "MidEpochResume", 2,
      join_options("", {{"LT_CKPT_DIR", dir.string()}, {"LT_STREAM", "1"}, {"LT_STREAM_WORKERS", "3"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(dir);
}

TEST(JoinLockstep, TimerAndMaxStepsWorkOnUnevenRanks) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_lockstep_ckpt_" + std::to_string(::getpid()));
  auto r = run_workers("StepFeaturesOnUnevenRanks", 2, join_options("", {{"LT_CKPT_DIR", dir.string()}}));
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_TRUE(std::filesystem::exists(dir / "last.ckpt"));
  std::filesystem::remove_all(dir);
}

TEST(JoinLockstep, ReplicasAreIdenticalAfterEveryOptimizerStep) {
  auto r = run_workers("ReplicaIdentity", 3, join_options(""));
  EXPECT_TRUE(r.ok()) << r.summary();
}

// -- bf16-mixed, GradientAccumulationScheduler and several optimizers under DDP + Join ----------

namespace {

// Prints the workers' "measured: ..." lines (rank 0's), so the figures a test states show in its log.
void print_measured(const lt::testing::WorkersResult& r) {
  if (r.outputs.empty()) return;
  std::istringstream lines(r.outputs[0]);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("measured: ") != std::string::npos) std::printf("%s\n", line.c_str());
  }
}

// JoinNet's model with a wider hidden layer in float32 (CPU autocast leaves
// float64 alone, so JoinNet itself would train the same in bf16-mixed).
class MixedNet : public lt::LightningModule {
 public:
  MixedNet() {
    l1 = register_module("l1", torch::nn::Linear(kIn, 16));
    l2 = register_module("l2", torch::nn::Linear(16, 1));
    init_like_oracle(*this);
    to(torch::kFloat);
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    torch::Tensor out = l2(torch::tanh(l1(batch.data)));
    forward_dtypes.insert(out.scalar_type());
    return torch::mse_loss(out, batch.target);
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLr).momentum(0.9));
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    return torch::cat(out);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  std::set<c10::ScalarType> forward_dtypes;  // of the training forward's output
};

}  // namespace

// precision bf16-mixed on 2 ranks with 5 and 8 batches, accumulate 2, 2
// epochs, SGD with momentum: every rank's training forward runs in bfloat16
// (the rank with 5 batches included), the replicas are bitwise identical
// after every optimizer step (parameters, momentum, lr, global_step) and at
// the end, 8 steps (4 windows of the longest rank per epoch), and the model
// stays near the 32-true run of the same. Measured: largest parameter
// difference bf16-mixed vs 32-true 3.0e-3 (the largest parameter is 0.42);
// asked < 0.02 and > 0 (bfloat16 rounding must change something).
LT_TEST_WORKER(Bf16MixedUnderJoin) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {5, 8};
  auto strategy = make_strategy();
  auto train = [&](const std::string& precision) {
    auto model = std::make_shared<MixedNet>();
    auto probe = std::make_shared<ReplicaChecksum>();
    lt::Trainer trainer(
        base_options(strategy, 2).max_epochs(2).accumulate_grad_batches(2).precision(precision).callbacks({probe}));
    trainer.fit(model, rank_loader(rank, counts[rank], torch::kFloat));
    int64_t steps = 0;
    LT_WORKER_CHECK(replicas_identical(*strategy, *probe, &steps), precision, ": the replicas differ after some ",
                    "optimizer step");
    LT_WORKER_CHECK(steps == 8 && trainer.global_step() == 8, precision, ": ", steps, " steps, global_step ",
                    trainer.global_step(), ", expected 8");
    const torch::Tensor all = strategy->all_gather(model->flat());
    LT_WORKER_CHECK(all[0].equal(all[1]), precision, ": the final parameters differ across ranks by ",
                    (all[0] - all[1]).abs().max().item<double>());
    LT_WORKER_CHECK(model->l1->weight.scalar_type() == torch::kFloat, precision, ": parameters are ",
                    model->l1->weight.scalar_type(), ", not float32");
    const c10::ScalarType want = precision == "bf16-mixed" ? torch::kBFloat16 : torch::kFloat;
    LT_WORKER_CHECK(model->forward_dtypes == std::set<c10::ScalarType>{want}, precision, ": the training forward ",
                    "did not run (only) in ", want);
    return model->flat();
  };
  const torch::Tensor full = train("32-true");
  const torch::Tensor mixed = train("bf16-mixed");
  LT_WORKER_CHECK(!lt::compat::autocast_enabled(c10::kCPU), "autocast still on after fit");
  const double largest = (mixed - full).abs().max().item<double>();
  const double scale = full.abs().max().item<double>();
  std::cerr << "measured: bf16-mixed vs 32-true under lockstep Join: largest parameter difference " << largest
            << " (largest parameter " << scale << ")" << std::endl;
  LT_WORKER_CHECK(largest > 0.0, "bf16-mixed trained exactly as 32-true: no autocast?");
  LT_WORKER_CHECK(largest < 0.02, "bf16-mixed drifted from 32-true by ", largest);
  return 0;
}

TEST(JoinLockstep, Bf16MixedKeepsReplicasIdenticalAndTracksFloat32OnUnevenRanks) {
  auto r = run_workers("Bf16MixedUnderJoin", 2, join_options(""));
  EXPECT_TRUE(r.ok()) << r.summary();
  print_measured(r);
}

// 16-mixed's gradient scaler (lt::MixedPrecision built by hand: on the CPU
// its CUDA autocast casts nothing, the scaler acts) under lockstep Join on
// uneven ranks: a joined rank unscales the reduced gradients and decides as
// the others do. With a power-of-two scale the run equals 32-true bitwise; a
// scale that overflows skips the same steps on every rank.
LT_TEST_WORKER(GradScalerUnderJoin) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {5, 8};
  auto strategy = make_strategy();
  auto train = [&](const std::shared_ptr<lt::Precision>& precision, const char* what) {
    auto model = std::make_shared<MixedNet>();
    auto probe = std::make_shared<ReplicaChecksum>();
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(2).accumulate_grad_batches(2).precision_plugin(precision)
                            .callbacks({probe}));
    trainer.fit(model, rank_loader(rank, counts[rank], torch::kFloat));
    int64_t steps = 0;
    LT_WORKER_CHECK(replicas_identical(*strategy, *probe, &steps), what, ": the replicas differ after some step");
    LT_WORKER_CHECK(trainer.global_step() == 8, what, ": global_step ", trainer.global_step(), ", expected 8");
    return model->flat();
  };
  const torch::Tensor full = train(nullptr, "32-true");
  auto scaled = std::make_shared<lt::MixedPrecision>();
  const torch::Tensor same = train(scaled, "16-mixed");
  LT_WORKER_CHECK(same.equal(full), "a power-of-two scale changed the result by ",
                  (same - full).abs().max().item<double>());
  LT_WORKER_CHECK(scaled->scaler().get_scale() == 65536.0 && scaled->scaler().growth_tracker() == 8,
                  "scale ", scaled->scaler().get_scale(), ", growth tracker ", scaled->scaler().growth_tracker());
  auto overflowing = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(std::ldexp(1.0, 127)));
  const torch::Tensor skipped = train(overflowing, "16-mixed from 2^127");
  const double scale = overflowing->scaler().get_scale();
  const torch::Tensor scales = strategy->all_gather(torch::tensor({scale}, torch::kDouble)).flatten();
  LT_WORKER_CHECK(scales[0].item<double>() == scales[1].item<double>(), "the ranks' scales differ: ", scales);
  LT_WORKER_CHECK(scale < std::ldexp(1.0, 127) && torch::isfinite(skipped).all().item<bool>(),
                  "no step was skipped, or a non-finite step was taken (scale ", scale, ")");
  std::cerr << "measured: 16-mixed from 2^127 under lockstep Join: " << std::log2(std::ldexp(1.0, 127) / scale)
            << " steps skipped on every rank" << std::endl;
  return 0;
}

TEST(JoinLockstep, GradScalerDecidesAlikeOnEveryRankUnderJoin) {
  auto r = run_workers("GradScalerUnderJoin", 2, join_options(""));
  EXPECT_TRUE(r.ok()) << r.summary();
  print_measured(r);
}

namespace {

// The window rule (join_oracle.py's window_rule_optimizer, SGD with momentum
// 0.9) written out, with accumulate_grad_batches k_by_epoch[e] in epoch e:
// per epoch ceil(longest / k) windows of k micro-batches of every rank that
// has them, one step per window on (1/D) * the sum of grad(loss / k) over
// them, D = the world size or, with divide_by_initial_world_size off, the
// ranks with data in the window.
torch::Tensor window_rule_momentum(const std::vector<int64_t>& counts, const std::vector<int64_t>& k_by_epoch,
                                   bool divide) {
  JoinNet model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(kLr).momentum(0.9));
  const int64_t ws = static_cast<int64_t>(counts.size());
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  for (const int64_t k : k_by_epoch) {
    for (int64_t w = 0; w * k < longest; ++w) {
      optimizer.zero_grad();
      int64_t active = 0;
      for (int64_t r = 0; r < ws; ++r) {
        active += counts[r] > w * k ? 1 : 0;
        for (int64_t i = w * k; i < std::min((w + 1) * k, counts[r]); ++i) {
          auto [x, y] = oracle_batch(r, i);
          (torch::mse_loss(model.forward(x), y) / static_cast<double>(k)).backward();
        }
      }
      torch::NoGradGuard no_grad;
      for (auto& p : model.parameters()) {
        if (p.grad().defined()) p.grad().div_(static_cast<double>(divide ? ws : active));
      }
      optimizer.step();
    }
  }
  return model.flat();
}

}  // namespace

// The hand-written window rule above equals the Python oracle's on every
// momentum line of tests/fixtures/join_lockstep.txt (one k for all epochs),
// so it can stand as the reference for a k that changes by epoch.
TEST(JoinLockstep, HandWrittenWindowRuleEqualsTheOracle) {
  int checked = 0;
  for (const LockstepConfig& c : read_lockstep()) {
    if (c.optim != "momentum" || c.mode != "lockstep") continue;
    const torch::Tensor got = window_rule_momentum(c.counts, std::vector<int64_t>(c.epochs, c.k), c.divide);
    const double error = (got - torch::tensor(c.params, torch::kDouble)).abs().max().item<double>();
    EXPECT_LE(error, 1e-12) << c.describe();
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

// GradientAccumulationScheduler {1: 2, 2: 3} on 3 ranks with 7, 4 and 5
// batches, 3 epochs, SGD with momentum: k = 1, 2, 3 by epoch, and no k
// divides every count. Per epoch every rank takes ceil(7 / k) steps (the
// longest rank's windows; the others pad to their window's end and then step
// joined): 7 + 4 + 3 = 14, on every rank; the replicas are identical after
// every step; the parameters equal the hand-written window rule with k by
// epoch within 1e-9 (measured: 4e-16), with the gradient divided by the
// world size (scheduled Join) and by the ranks with data in the window
// (divide_by_initial_world_size off: the heartbeat's count).
LT_TEST_WORKER(AccumulationScheduleUnderJoin) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {7, 4, 5};
  const std::map<int64_t, int64_t> scheduling = {{1, 2}, {2, 3}};
  const int64_t epochs = 3;
  auto strategy = make_strategy();
  double largest_error = 0;
  for (const bool divide : {true, false}) {
    strategy->options().join_divide_by_initial_world_size(divide);
    auto model = std::make_shared<JoinNet>();
    model->optim = "momentum";
    auto scheduler = std::make_shared<lt::GradientAccumulationScheduler>(scheduling);
    auto probe = std::make_shared<ReplicaChecksum>();
    std::vector<int64_t> k_by_epoch, steps_by_epoch;
    auto epochs_seen = std::make_shared<lt::LambdaCallback>();
    epochs_seen->on_train_epoch_end_fn = [&](lt::Trainer& trainer, lt::LightningModule&) {
      k_by_epoch.push_back(trainer.options().accumulate_grad_batches());
      steps_by_epoch.push_back(trainer.global_step());
    };
    lt::Trainer trainer(base_options(strategy, 3).max_epochs(epochs).callbacks({scheduler, probe, epochs_seen}));
    trainer.fit(model, rank_loader(rank, counts[rank]));
    // What the schedule must give: the longest rank's windows per epoch.
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    std::vector<int64_t> want_k, want_steps;
    int64_t total = 0;
    for (int64_t e = 0; e < epochs; ++e) {
      want_k.push_back(scheduler->get_accumulate_grad_batches(e));
      total += (longest + want_k.back() - 1) / want_k.back();
      want_steps.push_back(total);
    }
    LT_WORKER_CHECK(want_k == (std::vector<int64_t>{1, 2, 3}) && total == 14, "the schedule itself changed");
    LT_WORKER_CHECK(k_by_epoch == want_k, "divide ", divide, ": accumulate_grad_batches by epoch ",
                    k_by_epoch.size() > 2 ? c10::str(k_by_epoch[0], ",", k_by_epoch[1], ",", k_by_epoch[2]) : "?");
    LT_WORKER_CHECK(steps_by_epoch == want_steps && trainer.global_step() == total, "divide ", divide,
                    ": global_step after each epoch ",
                    steps_by_epoch.size() > 2
                        ? c10::str(steps_by_epoch[0], ",", steps_by_epoch[1], ",", steps_by_epoch[2])
                        : "?",
                    ", expected 7,11,14");
    int64_t steps = 0;
    LT_WORKER_CHECK(replicas_identical(*strategy, *probe, &steps) && steps == total, "divide ", divide,
                    ": the replicas differ after some optimizer step (", steps, " steps seen)");
    const double error = (model->flat() - window_rule_momentum(counts, want_k, divide)).abs().max().item<double>();
    LT_WORKER_CHECK(error <= 1e-9, "divide ", divide, ": parameters differ from the window rule by ", error);
    largest_error = std::max(largest_error, error);
  }
  strategy->options().join_divide_by_initial_world_size(true);
  std::cerr << "measured: accumulation schedule under Join: largest difference from the window rule "
            << largest_error << std::endl;
  return 0;
}

TEST(JoinLockstep, GradientAccumulationSchedulerStepsTheLongestRanksWindowsOnUnevenRanks) {
  auto r = run_workers("AccumulationScheduleUnderJoin", 3, join_options(""));
  EXPECT_TRUE(r.ok()) << r.summary();
  print_measured(r);
}

namespace {

// tests/trainer_test.cpp's TwoOptimizers (Lightning's GAN pattern: two
// optimizers, each step with the other's parameters toggled off) on
// join_oracle.py's model: two manual_backward, so two gradient syncs, per batch.
class TwoOptimizerNet : public lt::LightningModule {
 public:
  TwoOptimizerNet() {
    set_automatic_optimization(false);
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    init_like_oracle(*this);
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    ++training_steps;
    toggle_optimizer(0);
    torch::Tensor loss_a = torch::mse_loss(l2(torch::tanh(l1(batch.data))), batch.target);
    optimizer(0).zero_grad();
    manual_backward(loss_a);
    optimizer_step(0);
    untoggle_optimizer(0);
    toggle_optimizer(1);
    torch::Tensor loss_b = torch::mse_loss(l2(torch::tanh(l1(batch.data)).detach()), -batch.target);
    optimizer(1).zero_grad();
    manual_backward(loss_b);
    optimizer_step(1);
    untoggle_optimizer(1);
    return loss_b;
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    opt_a = std::make_shared<torch::optim::SGD>(l1->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    opt_b = std::make_shared<torch::optim::SGD>(l2->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
    return {opt_a, opt_b};
  }
  // The parameters, then both optimizers' momentum buffers.
  torch::Tensor state() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    for (const auto& optimizer : {opt_a, opt_b}) {
      for (auto& group : optimizer->param_groups()) {
        for (auto& p : group.params()) {
          auto it = optimizer->state().find(lt::optimizer_state_key(p));
          if (it == optimizer->state().end()) continue;
          out.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().reshape(-1));
        }
      }
    }
    return torch::cat(out);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_a, opt_b;
  int64_t training_steps = 0;
};

// TwoOptimizerNet as DDP trains it on `ws` ranks with `n` batches each: each
// optimizer steps on the mean over the ranks of their batch's gradient.
torch::Tensor two_optimizers_reference(int64_t ws, int64_t n, int64_t epochs) {
  TwoOptimizerNet m;
  m.configure_optimizers();
  auto average = [ws](const torch::nn::Module& layer) {
    torch::NoGradGuard no_grad;
    for (const auto& p : layer.parameters()) p.grad().div_(static_cast<double>(ws));
  };
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < n; ++i) {
      m.opt_a->zero_grad();
      for (int64_t r = 0; r < ws; ++r) {
        auto [x, y] = oracle_batch(r, i);
        torch::mse_loss(m.l2(torch::tanh(m.l1(x))), y).backward();
      }
      average(*m.l1);
      m.opt_a->step();
      m.opt_b->zero_grad();
      for (int64_t r = 0; r < ws; ++r) {
        auto [x, y] = oracle_batch(r, i);
        torch::mse_loss(m.l2(torch::tanh(m.l1(x)).detach()), -y).backward();
      }
      average(*m.l2);
      m.opt_b->step();
    }
  }
  return m.state();
}

}  // namespace

// Several optimizers under manual optimization with DDP:
//  - uneven inputs under Join (3 and 5 batches): refused on every rank before
//    the first training_step by the Join-compatibility check, naming manual
//    optimization and the ways out (declare the module's collectives, or
//    uneven_inputs: pad);
//  - declared (collectives().manual_declared = true) although training_step
//    calls manual_backward twice: refused on every rank at the second
//    manual_backward of the first batch, before its gradient allreduce (a
//    joined rank shadows one gradient sync per batch, so the ranks'
//    collectives would stop matching: a gloo abort or a hang);
//  - even inputs (4 batches each, 2 epochs) with uneven_inputs: pad (no Join)
//    and under Join (nobody joins): replicas identical (parameters and both
//    optimizers' momentum, bitwise), global_step 16 (two steps per batch), and
//    equal to the hand-written loop within 1e-9;
//  - without find_unused_parameters the toggled-off parameters get no
//    gradient, and the second batch stops with the Reducer's error naming
//    find_unused_parameters (as PyTorch's DDP).
LT_TEST_WORKER(SeveralOptimizersManualOptimization) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  strategy->options().find_unused_parameters(true);
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    } catch (const lt::JoinCompatibilityError& e) {
      error = e.what();
    }
    for (const char* expected :
         {"1 feature is incompatible with Join", "1. manual optimization: manual optimization decides itself",
          "Fix: declare the module's collectives with collectives().manual_declared = true",
          "or train with uneven_inputs: pad"}) {
      LT_WORKER_CHECK(error.find(expected) != std::string::npos, "refusal without '", expected, "': ", error);
    }
    LT_WORKER_CHECK(model->training_steps == 0 && trainer.global_step() == 0, "refused after ",
                    model->training_steps, " training steps");
  }
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    model->collectives().manual_declared = true;
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    } catch (const lt::Error& e) {
      error = e.what();
    }
    LT_WORKER_CHECK(error.find(c10::str("manual_backward called a second time in one batch (rank ", rank,
                                        ", epoch 0, batch 0)")) != std::string::npos &&
                        error.find("uneven_inputs: pad") != std::string::npos,
                    error);
    LT_WORKER_CHECK(model->training_steps == 1 && trainer.global_step() == 1, model->training_steps,
                    " training steps, global_step ", trainer.global_step());
  }
  for (const lt::UnevenInputs uneven : {lt::UnevenInputs::kPad, lt::UnevenInputs::kJoin}) {
    strategy->options().uneven_inputs(uneven);
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(2));
    trainer.fit(model, rank_loader(rank, 4));
    const char* name = uneven == lt::UnevenInputs::kPad ? "pad" : "join";
    LT_WORKER_CHECK(model->training_steps == 8 && trainer.global_step() == 16, name, ": ", model->training_steps,
                    " training steps, global_step ", trainer.global_step());
    const torch::Tensor state = model->state();
    const torch::Tensor all = strategy->all_gather(state);
    LT_WORKER_CHECK(all[0].equal(all[1]), name, ": the replicas differ by ",
                    (all[0] - all[1]).abs().max().item<double>());
    const double error = (state - two_optimizers_reference(2, 4, 2)).abs().max().item<double>();
    LT_WORKER_CHECK(error <= 1e-9, name, ": differs from the hand-written loop by ", error);
    std::cerr << "measured: two optimizers (" << name << "): difference from the hand-written loop " << error
              << std::endl;
  }
  strategy->options().uneven_inputs(lt::UnevenInputs::kJoin);
  strategy->options().find_unused_parameters(false);
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, 4));
    } catch (const std::exception& e) {
      error = e.what();
    }
    LT_WORKER_CHECK(error.find("find_unused_parameters") != std::string::npos && model->training_steps == 1,
                    model->training_steps, " training steps: ", error);
  }
  return 0;
}

TEST(JoinLockstep, SeveralOptimizersUnderManualOptimizationRefusedUnderJoinAndIdenticalOnEvenInputs) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_workers("SeveralOptimizersManualOptimization", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "a refusal waited for a timeout";
  print_measured(r);
}

// -- SyncBatchNorm under Join ----------------------------------------------------------------------

namespace {

// join_oracle.py's model with a synced batch norm: Linear -> SyncBatchNorm -> tanh -> Linear.
class SyncNet : public lt::LightningModule {
 public:
  SyncNet() {
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    bn = register_module("bn", lt::SyncBatchNorm(kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    init_like_oracle(*this);
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::mse_loss(l2(torch::tanh(bn(l1(batch.data)))), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLr));
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    out.push_back(bn->running_mean);
    out.push_back(bn->running_var);
    return torch::cat(out);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  lt::SyncBatchNorm bn{nullptr};
};

struct SyncBatchNormConfig {
  int ws = 0;
  std::vector<int64_t> counts;
  int64_t k = 1;
  int64_t epochs = 1;
  std::vector<double> params;
};

}  // namespace

// tests/fixtures/sync_batch_norm.txt (tests/python/sync_batch_norm_oracle.py):
// one process's batch norm over the union of the ranks' batches per iteration.
LT_TEST_WORKER(SyncBatchNormUnderJoin) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  auto configs = read_fixture<SyncBatchNormConfig>("sync_batch_norm.txt", [](std::istream& ss, SyncBatchNormConfig& c) {
    std::string counts;
    ss >> c.ws >> counts >> c.k >> c.epochs;
    c.counts = parse_counts(counts);
  });
  auto strategy = make_strategy();
  int ran = 0;
  for (const auto& c : configs) {
    if (c.ws != ws) continue;
    auto model = std::make_shared<SyncNet>();
    lt::Trainer trainer(base_options(strategy, ws).max_epochs(c.epochs).accumulate_grad_batches(c.k));
    trainer.fit(model, rank_loader(rank, c.counts[rank]));
    const torch::Tensor expected = torch::tensor(c.params, torch::kDouble);
    const torch::Tensor got = model->flat();
    LT_WORKER_CHECK(got.sizes() == expected.sizes(), "config ", ran, ": ", got.numel(), " values, fixture ",
                    expected.numel());
    const double diff = (got - expected).abs().max().item<double>();
    LT_WORKER_CHECK(diff < 1e-9, "counts ", c.counts[0], ",", c.counts[1], " k=", c.k, ": max |difference| ", diff,
                    " from one process's batch norm on the union");
    const torch::Tensor all = strategy->all_gather(got);
    LT_WORKER_CHECK((all == all[0]).all().item<bool>(), "config ", ran, ": replicas differ");
    ++ran;
  }
  LT_WORKER_CHECK(ran > 0, "no configuration for ", ws, " ranks in the fixture");
  return 0;
}

// ddp_comm_hook fp16_compress_hook: every bucket (a joined rank's zero
// buckets too) cast to float16 and divided by the world size before the
// allreduce gives PyTorch's DDP + Join with its fp16_compress_hook
// (tests/python/comm_hook_oracle.py), on 5/5 and 5/8 batches; without the
// hook the parameters differ by more than float16's rounding.
LT_TEST_WORKER(CommHookFp16) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  struct Expected {
    std::vector<int64_t> counts;
    std::vector<double> params;
  };
  const auto expected = read_fixture<Expected>("comm_hook_fp16.txt", [](std::istream& ss, Expected& e) {
    std::string counts;
    ss >> counts;
    e.counts = parse_counts(counts);
  });
  LT_WORKER_CHECK(expected.size() == 2, "comm_hook_fp16.txt: ", expected.size(), " configurations");
  for (const Expected& e : expected) {
    auto train = [&](lt::DDPCommHook hook) {
      strategy->options().ddp_comm_hook(hook);
      auto model = std::make_shared<JoinNet>();
      lt::Trainer trainer(base_options(strategy, 2));
      trainer.fit(model, rank_loader(rank, e.counts[rank]));
      strategy->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
      return model->flat();
    };
    const torch::Tensor want = torch::tensor(e.params, torch::kDouble);
    const double fp16 = (train(lt::DDPCommHook::kFp16Compress) - want).abs().max().item<double>();
    LT_WORKER_CHECK(fp16 <= 1e-12, "counts ", e.counts[0], ",", e.counts[1], ": fp16_compress_hook differs from "
                    "PyTorch's by ", fp16);
    const double fp32 = (train(lt::DDPCommHook::kAllreduce) - want).abs().max().item<double>();
    LT_WORKER_CHECK(fp32 > 1e-6, "counts ", e.counts[0], ",", e.counts[1], ": without the hook the parameters "
                    "differ from the compressed run's by only ", fp32);
  }
  // bf16 needs NCCL: on gloo a clear error before the first step.
  strategy->options().ddp_comm_hook(lt::DDPCommHook::kBf16Compress);
  std::string error = "<trained>";
  try {
    lt::Trainer trainer(base_options(strategy, 2));
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, 2));
  } catch (const lt::ValueError& e) {
    error = e.what();
  }
  strategy->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
  LT_WORKER_CHECK(error.find("bf16_compress_hook needs the nccl backend") != std::string::npos, error);
  return 0;
}

TEST(JoinCommHook, Fp16CompressionEqualsPyTorchsHookUnderJoin) {
  expect_workers_pass("CommHookFp16", 2, std::chrono::seconds(60));
}

// Counts 1, 3, 3: at iteration 2 rank 0 has joined and rank 2 logs a synced
// value rank 1 does not. The header sizes the reduction by the largest
// counts, and the per-value counts show the disagreement: every rank,
// the joined one too, throws the same error (no hang, no gloo abort).
LT_TEST_WORKER(SyncDistMismatchAfterARankJoined) {
  const int rank = env_int("RANK");
  class ExtraLog : public JoinNet {
   public:
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      torch::Tensor loss = JoinNet::training_step(batch, batch_idx);
      if (global_rank() == 2 && batch_idx == 2) log("extra", 1.0, lt::LogOptions().sync_dist(true));
      return loss;
    }
  };
  const std::vector<int64_t> counts = {1, 3, 3};
  lt::Trainer trainer(base_options(make_strategy(), 3));
  std::string error = "<trained>";
  try {
    trainer.fit(std::make_shared<ExtraLog>(), rank_loader(rank, counts[rank]));
  } catch (const lt::Error& e) {
    error = e.what();
  }
  LT_WORKER_CHECK(error.find("log(sync_dist=true) under Join: the active ranks logged different numbers of synced "
                             "values in one micro-batch (up to 2 sum/mean and 0 min/max values)") != std::string::npos,
                  "rank ", rank, ": ", error);
  return 0;
}

TEST(JoinLogging, ActiveRanksLoggingDifferentSyncedValuesAllThrow) {
  expect_workers_pass("SyncDistMismatchAfterARankJoined", 3, std::chrono::seconds(60));
}

TEST(JoinSyncBatchNorm, EqualsOneBatchNormOnTheUnionOnTwoRanks) {
  expect_workers_pass("SyncBatchNormUnderJoin", 2, std::chrono::seconds(90));
}

TEST(JoinSyncBatchNorm, EqualsOneBatchNormOnTheUnionOnThreeRanks) {
  expect_workers_pass("SyncBatchNormUnderJoin", 3, std::chrono::seconds(90));
}

TEST(JoinMatrix, TwoRanks) { expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120)); }

TEST(JoinMatrix, ThreeRanks) { expect_workers_pass("JoinMatrix", 3, std::chrono::seconds(120)); }

// The same matrix with every rank's rows read as a stream of unknown length
// (the window rule found at run time, a rank with no rows among them); on
// three ranks, by two loader workers per rank.
TEST(JoinMatrix, TwoRanksStreamed) {
  expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120), {{"LT_STREAM", "1"}});
}

TEST(JoinMatrix, ThreeRanksStreamed) {
  expect_workers_pass("JoinMatrix", 3, std::chrono::seconds(120), {{"LT_STREAM", "1"}, {"LT_STREAM_WORKERS", "2"}});
}

TEST(JoinMatrix, FourRanks) { expect_workers_pass("JoinMatrix", 4, std::chrono::seconds(150)); }

// A user's own per-iteration collective under uneven Join: a Joinable added
// with ParallelStrategy::add_joinable, called after backward on the ranks
// with data (the sum of their sample counts); its main hook shadows it with a
// zero on a rank that ran out, after the gradient sync's main hook, so the
// collectives keep matching. Without add_joinable rank 1 would wait alone.
class SampleCounter : public lt::Joinable {
 public:
  explicit SampleCounter(c10::intrusive_ptr<c10d::ProcessGroup> pg) : pg_(std::move(pg)) {}
  double count(double samples) { return allreduce_value(*pg_, samples); }
  std::unique_ptr<lt::JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  torch::Device join_device() const override { return torch::kCPU; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return pg_; }
  int64_t shadowed = 0;

 private:
  struct Hook : lt::JoinHook {
    explicit Hook(SampleCounter& owner) : owner(owner) {}
    void main_hook() override {
      owner.count(0.0);
      ++owner.shadowed;
    }
    SampleCounter& owner;
  };
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

LT_TEST_WORKER(ExtraJoinableUnderJoin) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  strategy->setup_environment(base_options(strategy, 2));
  auto counter = std::make_shared<SampleCounter>(strategy->process_group());
  strategy->add_joinable(counter);
  struct CountingNet : JoinNet {
    void on_after_backward() override { sums.push_back(counter->count(static_cast<double>(kBatch))); }
    std::shared_ptr<SampleCounter> counter;
    std::vector<double> sums;
  };
  auto model = std::make_shared<CountingNet>();
  model->counter = counter;
  lt::Trainer trainer(base_options(strategy, 2));
  trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 6));
  const std::vector<double> expected = rank == 0 ? std::vector<double>(3, 2.0 * kBatch)
                                                 : std::vector<double>{2.0 * kBatch, 2.0 * kBatch, 2.0 * kBatch,
                                                                       1.0 * kBatch, 1.0 * kBatch, 1.0 * kBatch};
  LT_WORKER_CHECK(model->sums == expected, "rank ", rank, ": the sums per iteration are ", c10::Join(", ", model->sums));
  LT_WORKER_CHECK(counter->shadowed == (rank == 0 ? 3 : 0), "rank ", rank, " shadowed ", counter->shadowed,
                  " iterations of the counter");
  return 0;
}

// The progress bar on the rank that ran out of data (rank 0: 3 of the longest rank's 6 batches) counts the
// epoch's iterations, which it keeps stepping through in lockstep: 6/6, not 3/3. Its metrics.csv (rank 0
// logs) has a train_loss row for each of the 6 steps, the last 3 the value rank 1 alone logged.
LT_TEST_WORKER(ProgressUnderJoin) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  auto csv = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(env_str("LT_OUT")).flush_logs_every_n_steps(1));
  lt::Trainer trainer(base_options(strategy, 2).enable_progress_bar(true).enable_model_summary(false).logger(csv));
  struct Recording : JoinNet {
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      torch::Tensor loss = JoinNet::training_step(batch, batch_idx);
      losses.push_back(loss.item<double>());
      return loss;
    }
    std::vector<double> losses;
  };
  auto model = std::make_shared<Recording>();
  trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 6));
  LT_WORKER_CHECK(trainer.state().epoch_length == 6 && trainer.state().epoch_iteration == 6, "rank ", rank,
                  ": epoch_length ", trainer.state().epoch_length, ", epoch_iteration ", trainer.state().epoch_iteration);
  // Rank 1's own losses of its last 3 batches, to rank 0.
  const torch::Tensor tail = strategy->broadcast(
      rank == 1 ? torch::tensor(std::vector<double>(model->losses.end() - 3, model->losses.end()), torch::kDouble)
                : torch::zeros({3}, torch::kDouble),
      1);
  if (rank != 0) return 0;
  std::ifstream in(csv->log_dir() + "/metrics.csv");
  std::string line;
  std::getline(in, line);  // the header
  const std::vector<std::string> columns = [&] {
    std::vector<std::string> out;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
    return out;
  }();
  const auto column = std::find(columns.begin(), columns.end(), "train_loss") - columns.begin();
  std::vector<double> logged;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (static_cast<size_t>(column) < cells.size() && !cells[column].empty()) logged.push_back(std::stod(cells[column]));
  }
  LT_WORKER_CHECK(logged.size() == 6, "rank 0 logged train_loss ", logged.size(), " times in 6 steps: ",
                  c10::Join(", ", logged));
  for (int i = 0; i < 3; ++i) {
    LT_WORKER_CHECK(std::abs(logged[3 + i] - tail[i].item<double>()) < 1e-6, "step ", 4 + i, ": logged ",
                    logged[3 + i], ", rank 1 alone logged ", tail[i].item<double>());
  }
  return 0;
}

TEST(JoinEpochContext, TheProgressBarOfARankThatRanOutCountsTheLongestRanksIterations) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  const auto out = std::filesystem::temp_directory_path() / ("lt_progress_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  options.env["LT_OUT"] = out.string();
  auto r = run_workers("ProgressUnderJoin", 2, options);
  std::filesystem::remove_all(out);
  ASSERT_TRUE(r.ok()) << r.summary();
  EXPECT_NE(r.outputs[0].find(": 6/6 batches"), std::string::npos) << r.outputs[0];
  EXPECT_EQ(r.outputs[0].find(": 3/3 batches"), std::string::npos) << r.outputs[0];
}

// With accumulation the longest rank (5 batches, windows of 2) pads its last window with a sixth
// micro-batch: an iteration, not a batch, so the bar ends at 5/5 (it said 6/5).
LT_TEST_WORKER(ProgressWithPadding) {
  const int rank = env_int("RANK");
  lt::Trainer trainer(base_options(make_strategy(), 2).enable_progress_bar(true).enable_model_summary(false)
                          .accumulate_grad_batches(2));
  trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, rank == 0 ? 3 : 5));
  return 0;
}

TEST(JoinEpochContext, TheProgressBarCountsBatchesNotTheLastWindowsPadding) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  auto r = run_workers("ProgressWithPadding", 2, options);
  ASSERT_TRUE(r.ok()) << r.summary();
  EXPECT_NE(r.outputs[0].find(": 5/5 batches"), std::string::npos) << r.outputs[0];  // rank 0 draws it
  EXPECT_EQ(r.outputs[0].find("6/5"), std::string::npos) << r.outputs[0];
}

TEST(JoinEpochContext, AJoinableAddedToTheStrategyIsShadowedByRanksThatRanOut) {
  expect_workers_pass("ExtraJoinableUnderJoin", 2, std::chrono::seconds(60));
}

// The foundation's promise: a strategy that brings only its gradient sync
// (~150 lines, tests/distributed/flat_allreduce_strategy.h) passes the join
// matrix against the Python oracle, lockstep and pytorch mode, streamed too.
TEST(JoinMatrix, TestOnlyFlatAllreduceStrategyOnTwoAndThreeRanks) {
  expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}});
  expect_workers_pass("JoinMatrix", 3, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}});
  expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}, {"LT_STREAM", "1"}});
}

TEST(JoinEpochContext, PadsToTheEndOfTheLastWindowOnlyWithJoin) {
  EXPECT_EQ(lt::join_num_iterations(5, 2, true), 6);
  EXPECT_EQ(lt::join_num_iterations(6, 3, true), 6);
  EXPECT_EQ(lt::join_num_iterations(0, 3, true), 0);
  EXPECT_EQ(lt::join_num_iterations(7, 1, true), 7);
  EXPECT_EQ(lt::join_num_iterations(5, 2, false), 5);
}

// -- Joinable logging ---------------------------------------------------------------------------

LT_TEST_WORKER(JoinSyncDistLogging) {
  const int rank = env_int("RANK");
  const std::vector<int64_t> counts = {1, 3, 2};
  auto model = std::make_shared<JoinNet>();
  model->log_value = true;
  lt::Trainer trainer(base_options(make_strategy(), 3));
  trainer.fit(model, rank_loader(rank, counts[rank]));
  // Rank r logs r + 1; the reduction is over the ranks still training.
  const std::vector<std::pair<double, double>> expected = {{2.0, 3.0}, {2.5, 3.0}, {2.0, 2.0}};
  LT_WORKER_CHECK(static_cast<int64_t>(model->logged.size()) == counts[rank]);
  for (size_t i = 0; i < model->logged.size(); ++i) {
    LT_WORKER_CHECK(model->logged[i] == expected[i], "batch ", i, ": mean ", model->logged[i].first, " max ",
                    model->logged[i].second);
  }
  return 0;
}

TEST(JoinLogging, SyncDistMeanAndMaxAreOverTheActiveRanksOnly) {
  expect_workers_pass("JoinSyncDistLogging", 3, std::chrono::seconds(60));
}

// -- Join disabled ---------------------------------------------------------------------------

LT_TEST_WORKER(JoinDisabledUneven) {
  const int rank = env_int("RANK");
  auto model = std::make_shared<JoinNet>();
  auto strategy = make_strategy();
  strategy->options().join_enable(false);
  lt::Trainer trainer(base_options(strategy, 2));
  try {
    trainer.fit(model, rank_loader(rank, rank == 0 ? 2 : 5));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    std::cerr << "rank " << rank << ": " << what << std::endl;
    LT_WORKER_CHECK(what.find("Join disabled (join_enable: false)") != std::string::npos);
    LT_WORKER_CHECK(what.find("rank 0: 2, rank 1: 5") != std::string::npos);
    LT_WORKER_CHECK(model->training_steps == 0);
    return 0;
  }
  LT_WORKER_CHECK(false, "fit trained uneven inputs with Join disabled instead of refusing them");
  return 1;
}

TEST(JoinDisabled, UnevenInputsFailWithAClearErrorInsteadOfHanging) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_workers("JoinDisabledUneven", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// -- The compatibility check ------------------------------------------------------------------

namespace {

// A third-party callback that declares its own answer.
class StepCollectiveCallback : public lt::Callback {
 public:
  std::string name() const override { return "StepCollectiveCallback"; }
  lt::JoinSupport join_support(const lt::TrainerOptions&) const override {
    return lt::JoinSupport::incompatible("it allreduces a metric in on_train_batch_end",
                                         "move the reduction to on_train_epoch_end");
  }
};

class QuietCallback : public lt::Callback {
 public:
  std::string name() const override { return "QuietCallback"; }
};

class ValNet : public JoinNet {
 public:
  bool has_validation_step() const override { return true; }
  void validation_step(const lt::Batch&, int64_t) override { ++validation_steps; }
  int64_t validation_steps = 0;
};

lt::FeatureSet features_of(const lt::TrainerOptions& options, const lt::LightningModule& module, bool validation,
                           bool scheduler_per_step) {
  lt::FeatureSet f;
  f.options = &options;
  f.module = &module;
  for (const auto& cb : options.callbacks()) f.callbacks.push_back(cb.get());
  f.has_validation = validation;
  f.scheduler_per_step = scheduler_per_step;
  return f;
}

}  // namespace

TEST(JoinCompatibility, ListsEveryIncompatibleFeatureWithItsReasonAndFix) {
  JoinNet module;
  module.set_automatic_optimization(false);
  module.collectives().in_forward = true;
  module.collectives().in_steps = true;
  auto options = lt::TrainerOptions()
                     .val_check_interval(0.5)
                     .callbacks({std::make_shared<StepCollectiveCallback>(), std::make_shared<QuietCallback>()});
  lt::JoinSettings pytorch_mode;
  pytorch_mode.mode = lt::JoinMode::kPyTorch;
  const auto report = lt::check_join_compatibility(features_of(options, module, true, true), pytorch_mode);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.with(lt::JoinCompatibility::kIncompatible).size(), 5u);
  const std::string message = report.refusal_message();
  for (const char* expected :
       {"5 features are incompatible", "1. callback StepCollectiveCallback: it allreduces a metric",
        "Fix: move the reduction to on_train_epoch_end", "val_check_interval=0.5", "set val_check_interval: 1.0",
        "manual optimization", "manual_declared = true", "collectives in forward", "user collectives in steps",
        "join_throw_on_early_termination: true"}) {
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\n" << message;
  }
  EXPECT_EQ(message.find("QuietCallback"), std::string::npos) << message;
  ASSERT_EQ(report.warnings().size(), 1u);
  EXPECT_NE(report.warnings()[0].find("per-step LR scheduler"), std::string::npos);
  // Lockstep (the default): a joined rank steps its scheduler with the others, so no warning.
  const auto lockstep = lt::check_join_compatibility(features_of(options, module, true, true), lt::JoinSettings{});
  EXPECT_EQ(lockstep.with(lt::JoinCompatibility::kIncompatible).size(), 5u);
  EXPECT_TRUE(lockstep.warnings().empty()) << lockstep.warnings().front();
}

TEST(JoinCompatibility, ThrowOnEarlyTerminationAndDeclarationsMakeACompatibleSet) {
  JoinNet module;
  module.set_automatic_optimization(false);
  module.collectives().manual_declared = true;
  module.collectives().in_forward = true;
  module.collectives().in_steps = true;
  auto options = lt::TrainerOptions().val_check_interval(1.0).callbacks({std::make_shared<QuietCallback>()});
  lt::JoinSettings settings;
  settings.throw_on_early_termination = true;
  const auto report = lt::check_join_compatibility(features_of(options, module, true, false), settings);
  EXPECT_TRUE(report.ok()) << report.refusal_message();
  EXPECT_EQ(report.with(lt::JoinCompatibility::kNeedsShadowing).size(), 1u);  // sync_dist logging
  // An integer val_check_interval validates mid-epoch.
  options.val_check_interval(3);
  EXPECT_FALSE(lt::check_join_compatibility(features_of(options, module, true, false), settings).ok());
  EXPECT_TRUE(lt::check_join_compatibility(features_of(options, module, false, false), settings).ok());
}

TEST(JoinCompatibility, BuiltInCallbacksDeclareTheirAnswer) {
  JoinNet module;
  auto options = lt::TrainerOptions().callbacks(
      {std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("train_loss")),
       std::make_shared<lt::ModelCheckpoint>(), std::make_shared<lt::ModelCheckpoint>(
                                                    lt::ModelCheckpointOptions().every_n_train_steps(5))});
  // Lockstep (the default): a joined rank reaches every step's save, so nothing is refused.
  const auto lockstep = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  EXPECT_TRUE(lockstep.ok()) << lockstep.refusal_message();
  lt::JoinSettings pytorch_mode;
  pytorch_mode.mode = lt::JoinMode::kPyTorch;
  const auto report = lt::check_join_compatibility(features_of(options, module, false, false), pytorch_mode);
  const auto refused = report.with(lt::JoinCompatibility::kIncompatible);
  ASSERT_EQ(refused.size(), 1u) << report.refusal_message();
  EXPECT_NE(report.refusal_message().find("every_n_train_steps=5"), std::string::npos) << report.refusal_message();
  EXPECT_NE(report.refusal_message().find("every_n_epochs"), std::string::npos) << report.refusal_message();
  // Manual optimization: a joined rank takes no step, lockstep or not.
  module.set_automatic_optimization(false);
  module.collectives().manual_declared = true;
  const auto manual = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  ASSERT_EQ(manual.with(lt::JoinCompatibility::kIncompatible).size(), 1u) << manual.refusal_message();
  EXPECT_NE(manual.refusal_message().find("lockstep needs automatic optimization"), std::string::npos)
      << manual.refusal_message();
}

TEST(JoinCompatibility, CollectiveLayersAreShadowedNotRefused) {
  SyncNet module;
  const auto options = lt::TrainerOptions();
  const auto report = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  EXPECT_TRUE(report.ok()) << report.refusal_message();
  bool listed = false;
  for (const auto* f : report.with(lt::JoinCompatibility::kNeedsShadowing)) {
    listed = listed || f->name == "collective layers (1, e.g. lt::SyncBatchNorm)";
  }
  EXPECT_TRUE(listed);
  // Collectives in forward that no layer shadows are still refused, with the way out.
  module.collectives().in_forward = true;
  const auto refused = lt::check_join_compatibility(features_of(options, module, false, false), lt::JoinSettings{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.refusal_message().find("lt::CollectiveLayer"), std::string::npos) << refused.refusal_message();
}

LT_TEST_WORKER(JoinRefusedBeforeTheFirstStep) {
  const int rank = env_int("RANK");
  auto model = std::make_shared<ValNet>();
  model->collectives().in_forward = true;
  auto options = base_options(make_strategy(), 2)
                     .val_check_interval(0.25)
                     .callbacks({std::make_shared<StepCollectiveCallback>()});
  lt::Trainer trainer(options);
  try {
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5), rank_loader(rank, 1));
  } catch (const lt::JoinCompatibilityError& e) {
    const std::string what = e.what();
    // Mid-epoch validation (val_check_interval 0.25) works in lockstep Join: not among them.
    LT_WORKER_CHECK(what.find("2 features are incompatible") != std::string::npos, what);
    LT_WORKER_CHECK(what.find("val_check_interval") == std::string::npos, what);
    LT_WORKER_CHECK(model->training_steps == 0);
    // The same process group then trains a compatible set.
    auto ok_model = std::make_shared<ValNet>();
    lt::Trainer ok_trainer(base_options(make_strategy(), 2).val_check_interval(1.0));
    ok_trainer.fit(ok_model, rank_loader(rank, rank == 0 ? 3 : 5), rank_loader(rank, 1));
    LT_WORKER_CHECK(ok_model->training_steps == (rank == 0 ? 3 : 5));
    // Even shards (4 batches each): nobody joins early, so the same features are not refused;
    // validation runs after every batch (val_check_interval 0.25).
    auto even_model = std::make_shared<ValNet>();
    even_model->collectives().in_forward = true;
    lt::Trainer even_trainer(options);
    even_trainer.fit(even_model, rank_loader(rank, 4), rank_loader(rank, 1));
    LT_WORKER_CHECK(even_model->training_steps == 4 && even_model->validation_steps == 4,
                    even_model->training_steps, " steps, ", even_model->validation_steps, " validation steps");
    return 0;
  }
  LT_WORKER_CHECK(false, "fit was not refused");
  return 1;
}

TEST(JoinCompatibility, TheStrategyRefusesTheRunOnEveryRankBeforeTheFirstStep) {
  expect_workers_pass("JoinRefusedBeforeTheFirstStep", 2, std::chrono::seconds(60));
}
