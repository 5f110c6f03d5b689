// EpochDriver (plugins/join/epoch_driver.h): the micro-batch sequence of one
// rank's training epoch, in one process. A scripted strategy's context pads
// the last window (as Join's does) and answers the stop agreement as told, so
// that what the driver owns is seen without other ranks: windows, a stream's
// end, the resume point, padding and its step, the stops, the finish.

#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <optional>
#include <vector>

#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/plugins/join/epoch_context.h>
#include <lightning_cpp/plugins/join/epoch_driver.h>

#include "support/row_stream.h"

namespace {

// What the scripted context is told, and what it saw.
struct Script {
  bool pad = false;                // Join's padding: ceil(n/k)*k iterations
  bool stop_in_epoch = false;      // the other ranks' wish at each boundary
  bool stop_after_finish = false;  // ... once the epoch finished
  int stop_asks = 0;
  int finishes = 0;
  std::vector<int64_t> ended;  // end_batch's iterations
};

class ScriptedContext : public lt::TrainingEpochContext {
 public:
  ScriptedContext(const lt::EpochPlan& plan, Script& script) : TrainingEpochContext(plan), script_(script) {}
  int64_t num_iterations() const override {
    return lt::join_num_iterations(plan().num_batches, plan().accumulate_grad_batches, script_.pad);
  }
  void end_batch(int64_t iteration) override { script_.ended.push_back(iteration); }
  bool stop_requested(bool local) override {
    ++script_.stop_asks;
    return local || (script_.finishes > 0 ? script_.stop_after_finish : script_.stop_in_epoch);
  }
  void finish() override { ++script_.finishes; }

 private:
  Script& script_;
};

class ScriptedStrategy : public lt::Strategy {
 public:
  std::string name() const override { return "scripted"; }
  std::unique_ptr<lt::TrainingEpochContext> training_epoch_context(lt::LightningModule& /*module*/,
                                                                   const lt::EpochPlan& plan) override {
    return std::make_unique<ScriptedContext>(plan, script);
  }
  Script script;
};

class Steps : public lt::EpochSteps {
 public:
  explicit Steps(lt::RunState& state, bool without_batch = true) : state_(state), without_batch_(without_batch) {}
  bool steps_without_batch() const override { return without_batch_; }
  void optimizer_step() override { ++state_.global_step; }
  void joined_iteration_end(int64_t iteration) override { joined.push_back(iteration); }
  std::vector<int64_t> joined;

 private:
  lt::RunState& state_;
  bool without_batch_;
};

class Module : public lt::LightningModule {
 public:
  Module() { w = register_parameter("w", torch::ones({2})); }
  torch::Tensor training_step(const lt::Batch& /*batch*/, int64_t /*batch_idx*/) override { return w.sum(); }
  lt::OptimizerConfig configure_optimizers() override { return {}; }
  torch::Tensor w;
};

std::shared_ptr<lt::TensorDataset> rows(int64_t n) {
  return std::make_shared<lt::TensorDataset>(torch::arange(n).unsqueeze(1).to(torch::kFloat), torch::zeros({n, 1}));
}

struct Epoch {
  explicit Epoch(int64_t n, int64_t k, bool stream = false) : steps(state) {
    if (stream) {
      loader = std::make_unique<lt::DataLoader>(
          std::make_shared<lt::testing::RowStream>(torch::zeros({n, 1}), torch::zeros({n, 1})), lt::DataLoaderOptions(1));
    } else {
      loader = std::make_unique<lt::DataLoader>(rows(n), lt::DataLoaderOptions(1));
    }
    plan.num_batches = stream ? -1 : n;
    plan.accumulate_grad_batches = k;
    plan.state = &state;
    plan.steps = &steps;
  }
  // Every micro-batch to the end (or a stop), as a loop runs them.
  std::vector<lt::MicroBatch> run(lt::EpochDriver& driver) {
    std::vector<lt::MicroBatch> seen;
    while (const auto micro = driver.next()) {
      seen.push_back(*micro);
      if (micro->padding) driver.run_padding(*micro);
      driver.end_batch();
      if (driver.stops_after(*micro)) break;
    }
    driver.finish();
    return seen;
  }
  lt::RunState state;
  Steps steps;
  lt::EpochPlan plan;
  std::unique_ptr<lt::DataLoader> loader;
  ScriptedStrategy strategy;
  Module module;
};

std::vector<bool> window_ends(const std::vector<lt::MicroBatch>& seen) {
  std::vector<bool> out;
  for (const auto& m : seen) out.push_back(m.ends_window);
  return out;
}

TEST(EpochDriver, WindowsAreAlignedOnTheIndexAndTheLastBatchClosesOne) {
  Epoch e(5, 2);
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  EXPECT_EQ(driver.epoch_length(), 5);
  const auto seen = e.run(driver);
  ASSERT_EQ(seen.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(seen[i].index, i);
    EXPECT_FALSE(seen[i].padding);
  }
  EXPECT_EQ(window_ends(seen), (std::vector<bool>{false, true, false, true, true}));
  EXPECT_EQ(e.strategy.script.ended, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(e.state.epoch_iteration, 5);
  EXPECT_EQ(e.state.num_training_batches, 5);
  EXPECT_EQ(e.strategy.script.finishes, 1);
  EXPECT_FALSE(driver.stopped());
  EXPECT_EQ(e.state.interrupted_by, 0);
}

// A stream of unknown length: its end is found one batch ahead, so that its
// last batch closes the window; a count limit ends it the same way.
TEST(EpochDriver, AStreamsEndIsFoundOneBatchAhead) {
  Epoch e(5, 2, /*stream=*/true);
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  EXPECT_EQ(e.state.num_training_batches, -1);
  EXPECT_EQ(driver.num_batches(), -1);
  const auto seen = e.run(driver);
  EXPECT_EQ(window_ends(seen), (std::vector<bool>{false, true, false, true, true}));
  EXPECT_EQ(e.state.num_training_batches, 5);
  EXPECT_EQ(e.state.epoch_length, 5);

  Epoch limited(5, 2, /*stream=*/true);
  lt::EpochDriver capped(limited.strategy, limited.module, *limited.loader, limited.plan, /*limit=*/3);
  EXPECT_EQ(window_ends(limited.run(capped)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(limited.state.num_training_batches, 3);
}

TEST(EpochDriver, StartsWhereAMidEpochCheckpointLeftTheEpoch) {
  Epoch e(6, 2);
  e.state.resume_iteration = 4;
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  EXPECT_EQ(e.state.resume_iteration, 0);  // taken: the next epoch starts at 0
  EXPECT_EQ(e.state.epoch_iteration, 4);
  const auto seen = e.run(driver);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].index, 4);
  EXPECT_EQ(e.state.epoch_iteration, 6);
}

// Join's padding: 3 batches, k = 2: the 4th iteration is a zero loss that
// closes the window; the loop's step runs there (a gradient of zeros), where
// the loop can step without a batch; where it cannot (manual optimization), nothing runs.
TEST(EpochDriver, PaddingClosesTheLastWindowWithTheLoopsStep) {
  for (bool without_batch : {true, false}) {
    Epoch e(3, 2);
    Steps steps(e.state, without_batch);
    e.plan.steps = &steps;
    e.strategy.script.pad = true;
    lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
    std::vector<lt::MicroBatch> seen;
    while (const auto micro = driver.next()) {
      seen.push_back(*micro);
      if (micro->padding) {
        driver.run_padding(*micro);
      } else if (micro->ends_window) {
        steps.optimizer_step();  // the loop's own step after a real window
      }
      driver.end_batch();
    }
    driver.finish();
    ASSERT_EQ(seen.size(), 4u) << without_batch;
    EXPECT_FALSE(seen[2].padding);
    EXPECT_FALSE(seen[2].ends_window);  // the last batch does not close the window: padding does
    EXPECT_TRUE(seen[3].padding);
    EXPECT_TRUE(seen[3].ends_window);
    EXPECT_EQ(e.state.global_step, without_batch ? 2 : 1);
    EXPECT_EQ(e.module.w.grad().defined(), without_batch);
    if (without_batch) EXPECT_TRUE(e.module.w.grad().eq(0).all().item<bool>());
    EXPECT_EQ(e.state.num_training_batches, 3);
    EXPECT_EQ(e.state.epoch_iteration, 4);
  }
}

TEST(EpochDriver, StopsAfterMaxStepsOrShouldStopWithoutCallingItASignal) {
  Epoch e(6, 2);
  e.plan.max_steps = 1;
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  std::vector<lt::MicroBatch> seen;
  while (const auto micro = driver.next()) {
    seen.push_back(*micro);
    if (micro->ends_window) e.steps.optimizer_step();
    driver.end_batch();
    if (driver.stops_after(*micro)) break;
  }
  driver.finish();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(driver.stopped());
  EXPECT_EQ(e.state.interrupted_by, 0);

  Epoch s(6, 2);
  lt::EpochDriver stopping(s.strategy, s.module, *s.loader, s.plan);
  ASSERT_TRUE(stopping.next());
  stopping.end_batch();
  s.state.should_stop = true;  // as EarlyStopping sets it, on every rank alike
  EXPECT_TRUE(stopping.stops_after(lt::MicroBatch{0, false, false}));
  EXPECT_EQ(s.state.interrupted_by, 0);
}

// A stop the ranks agree on (a signal on some rank) is asked at window ends
// only, and ends the epoch as stopped on request (SIGTERM where this process
// got no signal itself); after finish() it is not asked again.
TEST(EpochDriver, AnAgreedStopIsAskedAtWindowEndsAndNamesTheSignal) {
  Epoch e(6, 2);
  e.strategy.script.stop_in_epoch = true;
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  const auto seen = e.run(driver);
  ASSERT_EQ(seen.size(), 2u);  // the first window's end
  EXPECT_EQ(e.strategy.script.stop_asks, 1);
  EXPECT_TRUE(driver.stopped());
  EXPECT_EQ(e.state.interrupted_by, SIGTERM);
  EXPECT_EQ(e.strategy.script.finishes, 1);
}

// A rank that ran out of data learns of another's stop at the epoch's end.
TEST(EpochDriver, FinishLearnsOfAStopAnotherRankAskedFor) {
  Epoch e(4, 2);
  e.strategy.script.stop_after_finish = true;
  lt::EpochDriver driver(e.strategy, e.module, *e.loader, e.plan);
  const auto seen = e.run(driver);
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(e.strategy.script.stop_asks, 3);  // two window ends, then after finish()
  EXPECT_TRUE(driver.stopped());
  EXPECT_EQ(e.state.interrupted_by, SIGTERM);

  Epoch quiet(4, 2);
  lt::EpochDriver calm(quiet.strategy, quiet.module, *quiet.loader, quiet.plan);
  quiet.run(calm);
  EXPECT_FALSE(calm.stopped());
  EXPECT_EQ(quiet.state.interrupted_by, 0);
}

}  // namespace
