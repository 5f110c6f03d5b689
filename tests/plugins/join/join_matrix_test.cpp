// plugins/join/epoch_context.h against tests/python/join_oracle.py: the DDP
// epoch context trains uneven inputs through the Trainer (no_sync windows,
// Join, pad) and its parameters equal the oracle's fixtures
// (tests/fixtures/join_matrix.txt; lockstep with stateful optimizers:
// tests/fixtures/join_lockstep.txt), on 2, 3 and 4 worker processes over
// Gloo, rows read whole or as streams, with DDP and with the test-only
// strategy of tests/distributed/flat_allreduce_strategy.h.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "distributed/flat_allreduce_strategy.h"
#include "plugins/join/join_fixture.h"
#include "support/cuda.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

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

// The foundation's promise: a strategy that brings only its gradient sync
// (~150 lines, tests/distributed/flat_allreduce_strategy.h) passes the join
// matrix against the Python oracle, lockstep and pytorch mode, streamed too.
TEST(JoinMatrix, TestOnlyFlatAllreduceStrategyOnTwoAndThreeRanks) {
  expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}});
  expect_workers_pass("JoinMatrix", 3, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}});
  expect_workers_pass("JoinMatrix", 2, std::chrono::seconds(120), {{"LT_FLAT_ALLREDUCE", "1"}, {"LT_STREAM", "1"}});
}

// The same matrices with the model, the batches and every collective's
// tensors on CUDA: two ranks share the one GPU over Gloo, against the same
// oracle fixtures.
TEST(CudaJoinMatrix, TwoRanksSharingTheGpu) {
  LT_SKIP_WITHOUT_CUDA();
  expect_workers_pass_on_one_gpu("JoinMatrix", 2, std::chrono::seconds(180));
}

TEST(CudaJoinLockstep, StatefulOptimizersOnTwoRanksSharingTheGpu) {
  LT_SKIP_WITHOUT_CUDA();
  expect_workers_pass_on_one_gpu("JoinLockstepMatrix", 2, std::chrono::seconds(240));
}
