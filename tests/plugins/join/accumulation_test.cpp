// plugins/join/epoch_context.h's accumulation windows under Join with a
// GradientAccumulationScheduler (callbacks/gradient_accumulation_scheduler.h):
// k changes by epoch on uneven ranks and the parameters equal a hand-written
// window rule, itself checked against the Python oracle's
// (tests/fixtures/join_lockstep.txt). Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

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
