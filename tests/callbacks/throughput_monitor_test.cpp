// callbacks/throughput_monitor.h: the counts logged are the data's, each rate
// is the window's count over the window's time (the logged times), validation
// is left out of the training time, and the FLOPs measured with the profiler
// are those of the model's step (what Python's FlopCounterMode counts: the
// analytic count of its matrix products). On 2 ranks with uneven inputs
// (lockstep Join) under ddp and fsdp, the global rates count what each rank
// trained: a rank that ran out of data adds nothing (Lightning's would double
// rank 0's rate).
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/throughput_monitor.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "distributed/join_oracle.h"
#include "support/multiprocess.h"

using namespace lt::testing;

namespace {

class RowLogger : public lt::Logger {
 public:
  std::string name() const override { return "rows"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    if (metrics.count("train/time")) rows[step] = metrics;
  }
  std::map<int64_t, std::map<std::string, double>> rows;  // by step: the monitor's metrics
};

// 10 -> 32 -> 3, SGD; validation sleeps, so that its time shows if it is counted.
class Mlp : public lt::LightningModule {
 public:
  explicit Mlp(std::chrono::milliseconds validation_sleep = {}) : validation_sleep_(validation_sleep) {
    fc1_ = register_module("fc1", torch::nn::Linear(10, 32));
    fc2_ = register_module("fc2", torch::nn::Linear(32, 3));
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    return torch::mse_loss(fc2_(torch::relu(fc1_(b.data))), b.target);
  }
  void validation_step(const lt::Batch&, int64_t) override { std::this_thread::sleep_for(validation_sleep_); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01));
  }

 private:
  std::chrono::milliseconds validation_sleep_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

std::shared_ptr<lt::DataLoader> mlp_data(int64_t n) {
  return std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(torch::randn({n, 10}), torch::randn({n, 3})), lt::DataLoaderOptions(4));
}

}  // namespace

// 6 batches of 4 samples (40 data elements each) a epoch, 2 epochs, a window
// of 3 steps: at step s the totals are s batches, 4s samples, 40s items; the
// rates are the window's counts (the steps since max(1, s - 2)) over the time
// between those steps' logged times; FLOPs and MFU follow the given counts.
TEST_F(CallbacksTest, ThroughputMonitorCountsTheDataAndRatesItsWindow) {
  auto logger = std::make_shared<RowLogger>();
  auto monitor = std::make_shared<lt::ThroughputMonitor>(
      lt::ThroughputMonitorOptions().window_size(3).flops_per_batch(1000).peak_flops(1e6).length("data"));
  lt::Trainer trainer(options(2).callbacks({monitor}).logger(logger).log_every_n_steps(1));
  const auto validation_sleep = std::chrono::milliseconds(300);
  trainer.fit(std::make_shared<Mlp>(validation_sleep), mlp_data(24), mlp_data(4));
  ASSERT_EQ(logger->rows.size(), 12u);
  for (const auto& [s, m] : logger->rows) {
    EXPECT_EQ(m.at("train/batches"), s);
    EXPECT_EQ(m.at("train/samples"), 4 * s);
    EXPECT_EQ(m.at("train/lengths"), 40 * s);
    if (s == 1) {
      EXPECT_EQ(m.count("train/device/samples_per_sec"), 0u) << "a rate from one record";
      continue;
    }
    const int64_t first = std::max<int64_t>(1, s - 2);
    const double seconds = m.at("train/time") - logger->rows.at(first).at("train/time");
    const double samples_per_sec = m.at("train/device/samples_per_sec");
    EXPECT_NEAR(samples_per_sec, 4.0 * static_cast<double>(s - first) / seconds, 1e-9 * samples_per_sec) << s;
    EXPECT_NEAR(m.at("train/device/batches_per_sec"), samples_per_sec / 4, 1e-9 * samples_per_sec) << s;
    EXPECT_NEAR(m.at("train/device/items_per_sec"), samples_per_sec * 10, 1e-9 * samples_per_sec) << s;
    EXPECT_NEAR(m.at("train/device/flops_per_sec"), samples_per_sec / 4 * 1000, 1e-9 * samples_per_sec) << s;
    EXPECT_NEAR(m.at("train/device/mfu"), samples_per_sec / 4 * 1000 / 1e6, 1e-12 * samples_per_sec) << s;
    EXPECT_EQ(m.count("train/samples_per_sec"), 0u) << "global rates with one rank";
  }
  // The first epoch's validation (and the sanity check's) slept 300 ms; the
  // time between steps 6 and 7 is a step's, not the validation's.
  const double across = logger->rows.at(7).at("train/time") - logger->rows.at(6).at("train/time");
  EXPECT_LT(across, 0.2) << "validation counted as training time";
  EXPECT_EQ(monitor->last_metrics(), logger->rows.at(12));
}

// measure_flops counts the first batch's forward and backward; no peak
// given: the matrix-product rate, measured at fit start, is what MFU divides by.
TEST_F(CallbacksTest, ThroughputMonitorMeasuresTheModelsFlops) {
  auto logger = std::make_shared<RowLogger>();
  auto monitor = std::make_shared<lt::ThroughputMonitor>(lt::ThroughputMonitorOptions().measure_flops(true));
  lt::Trainer trainer(options(1).callbacks({monitor}).logger(logger).log_every_n_steps(2));
  trainer.fit(std::make_shared<Mlp>(), mlp_data(24));
  EXPECT_DOUBLE_EQ(monitor->flops_per_batch(), 2.0 * 4 * (10 * 32 * 2 + 32 * 3 * 3));  // 7424, as FlopCounterMode
  EXPECT_GT(monitor->peak_flops(), 1e8);
  const auto& last = logger->rows.at(6);
  EXPECT_DOUBLE_EQ(last.at("train/device/flops_per_sec"), last.at("train/device/batches_per_sec") * 7424);
  EXPECT_DOUBLE_EQ(last.at("train/device/mfu"), last.at("train/device/flops_per_sec") / monitor->peak_flops());
  EXPECT_EQ(logger->rows.size(), 3u) << "every log_every_n_steps (2) of 6 steps";
}

// Bad options: located errors naming the option and the valid values.
TEST_F(CallbacksTest, ThroughputMonitorRefusesBadOptions) {
  try {
    lt::ThroughputMonitor monitor(lt::ThroughputMonitorOptions().window_size(1));
    FAIL() << "window_size 1 was taken";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("ThroughputMonitor: window_size must be >= 2, got 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(lt::ThroughputMonitor(lt::ThroughputMonitorOptions().length("tokens")), lt::ValueError);
}

// 2 ranks, 5 and 3 batches of JoinNet's 2 samples (lockstep Join), a window
// of one step, each step at least 20 ms: every rank's totals are its own
// data; at step 2 both ranks train and the global rate is about twice rank
// 0's; at step 5 rank 1 has none (it ran out after step 3) and the global
// rate is about rank 0's alone. FLOPs, measured on each rank, are JoinNet's
// step (3 -> 4 -> 1 on 2 samples: 144) under ddp and under fsdp FULL_SHARD.
LT_TEST_WORKER(ThroughputUnevenInputs) {
  const int rank = env_int("RANK");
  struct SlowNet : JoinNet {
    using JoinNet::JoinNet;
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return JoinNet::training_step(batch, batch_idx);
    }
  };
  static auto ddp = std::make_shared<lt::DDPStrategy>(
      lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  static auto fsdp = std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions()
                                                            .process_group_timeout(std::chrono::seconds(30))
                                                            .sharding_strategy(lt::ShardingStrategy::kFullShard));
  for (const std::shared_ptr<lt::Strategy>& strategy : std::vector<std::shared_ptr<lt::Strategy>>{ddp, fsdp}) {
    auto logger = std::make_shared<RowLogger>();
    auto monitor = std::make_shared<lt::ThroughputMonitor>(
        lt::ThroughputMonitorOptions().window_size(2).measure_flops(true).peak_flops(1e9).log_per_rank(true));
    lt::Trainer trainer(lt::TrainerOptions()
                            .strategy(strategy)
                            .accelerator("cpu")
                            .devices(2)
                            .max_epochs(1)
                            .log_every_n_steps(1)
                            .callbacks({monitor})
                            .logger(logger)
                            .default_logger(false)
                            .enable_progress_bar(false)
                            .enable_model_summary(false)
                            .default_root_dir(std::filesystem::temp_directory_path().string()));
    trainer.fit(std::make_shared<SlowNet>(strategy == fsdp), rank_loader(rank, rank == 0 ? 5 : 3));
    const std::string who = strategy->name();
    LT_WORKER_CHECK(trainer.global_step() == 5, who, ": ", trainer.global_step(), " steps");
    LT_WORKER_CHECK(monitor->flops_per_batch() == 144, who, ": ", monitor->flops_per_batch(), " FLOPs a batch");
    const auto& mine = monitor->last_metrics();
    LT_WORKER_CHECK(mine.at("train/samples") == (rank == 0 ? 10 : 6), who, ": ", mine.at("train/samples"));
    if (rank != 0) continue;
    LT_WORKER_CHECK(logger->rows.size() == 5, who, ": ", logger->rows.size(), " rows");
    const auto& both = logger->rows.at(2);
    const auto& alone = logger->rows.at(5);
    LT_WORKER_CHECK(both.at("train/rank1/samples_per_sec") > 0 && alone.at("train/rank1/samples_per_sec") == 0, who,
                    ": rank 1's rates ", both.at("train/rank1/samples_per_sec"), " and ",
                    alone.at("train/rank1/samples_per_sec"));
    const double both_ratio = both.at("train/samples_per_sec") / both.at("train/device/samples_per_sec");
    const double alone_ratio = alone.at("train/samples_per_sec") / alone.at("train/device/samples_per_sec");
    LT_WORKER_CHECK(both_ratio > 1.5 && both_ratio < 2.5, who, ": global / rank 0 at step 2: ", both_ratio);
    LT_WORKER_CHECK(alone_ratio > 0.75 && alone_ratio < 1.33, who, ": global / rank 0 at step 5: ", alone_ratio);
    for (const auto* m : {&both, &alone}) {
      const double flops = m->at("train/flops_per_sec"), batches = m->at("train/batches_per_sec");
      LT_WORKER_CHECK(std::abs(flops - batches * 144) <= 1e-9 * flops, who, ": ", flops, " FLOP/s for ", batches,
                      " batches/s");
      LT_WORKER_CHECK(std::abs(m->at("train/mfu") - flops / 2e9) <= 1e-12, who, ": global mfu ", m->at("train/mfu"));
    }
  }
  return 0;
}

TEST(ThroughputMonitorDistributed, GlobalRatesCountEachRanksSamplesUnderJoinDdpAndFsdp) {
  expect_workers_pass("ThroughputUnevenInputs", 2, std::chrono::seconds(90));
}
