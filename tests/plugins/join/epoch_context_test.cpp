// plugins/join/epoch_context.h: a user's Joinable added to the strategy is
// shadowed by ranks that ran out; the progress bar counts the longest rank's
// iterations, not the last window's padding; the padded iteration count; with
// Join disabled, uneven inputs fail with a clear error instead of hanging.
// Real worker processes over Gloo.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/plugins/join/epoch_context.h>
#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"
#include "support/row_stream.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

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

TEST(JoinEpochContext, PadsToTheEndOfTheLastWindowOnlyWithJoin) {
  EXPECT_EQ(lt::join_num_iterations(5, 2, true), 6);
  EXPECT_EQ(lt::join_num_iterations(6, 3, true), 6);
  EXPECT_EQ(lt::join_num_iterations(0, 3, true), 0);
  EXPECT_EQ(lt::join_num_iterations(7, 1, true), 7);
  EXPECT_EQ(lt::join_num_iterations(5, 2, false), 5);
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
