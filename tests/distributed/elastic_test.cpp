// A run resumed on another world size mid-epoch (data/epoch_samples.h): every
// sample of the epoch is trained exactly once across the runs. Real worker
// processes, gloo on 127.0.0.1.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <lightning_cpp/lightning.h>

#include "support/multiprocess.h"

using namespace lt::testing;

namespace {

constexpr int64_t kSamples = 23;

// Sample i is the number i; each trained sample's (epoch, index) goes to this rank's record file.
class RecordingNet : public lt::LightningModule {
 public:
  explicit RecordingNet(std::string record) : record_(std::move(record)) {
    linear = register_module("linear", torch::nn::Linear(1, 1));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    std::ofstream out(record_, std::ios::app);
    for (int64_t i = 0; i < batch.data.size(0); ++i) {
      out << current_epoch() << " " << batch.data[i][0].item<int64_t>() << "\n";
    }
    return torch::mse_loss(linear(batch.data / kSamples), batch.target);
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  torch::nn::Linear linear{nullptr};

 private:
  std::string record_;
};

// One phase: WORLD_SIZE ranks from LT_RESUME (or the start) until LT_MAX_STEPS
// (-1: the end of 2 epochs), a checkpoint after every step.
LT_TEST_WORKER(ElasticPhase) {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const std::string dir = env_str("LT_DIR");
  auto data = torch::arange(kSamples, torch::kFloat).unsqueeze(1);
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data, torch::zeros_like(data)),
                                                 lt::DataLoaderOptions(2).shuffle(true).seed(7));
  auto options = lt::TrainerOptions()
                     .devices(world)
                     .max_epochs(2)
                     .max_steps(env_int("LT_MAX_STEPS"))
                     .enable_progress_bar(false)
                     .enable_model_summary(false)
                     .default_logger(false)
                     .default_root_dir(dir)
                     .callbacks({std::make_shared<lt::ModelCheckpoint>(
                         lt::ModelCheckpointOptions().dirpath(dir + "/ckpts").every_n_train_steps(1).save_top_k(-1))});
  if (world > 1 && env_str("LT_STRATEGY") == "fsdp") {
    options.strategy(std::make_shared<lt::FSDPStrategy>(
        lt::FSDPStrategyOptions().process_group_timeout(std::chrono::seconds(30))));
  } else if (world > 1) {
    options.strategy(std::make_shared<lt::DDPStrategy>(
        lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30))));
  }
  const bool per_rank = env_int("LT_PER_RANK") == 1;  // each rank its own data, as given
  options.use_distributed_sampler(!per_rank);
  lt::Trainer trainer(options);
  const std::string record = dir + "/samples." + env_str("LT_PHASE") + "." + std::to_string(rank);
  try {
    trainer.fit(std::make_shared<RecordingNet>(record), loader, nullptr, env_str("LT_RESUME"));
  } catch (const lt::ValueError& e) {
    // Per-rank data resumed on another world size: refused, naming why, before a step.
    const std::string what = e.what();
    LT_WORKER_CHECK(per_rank && what.find("was written mid-epoch by 2 ranks and this run has 1, but it records no "
                                          "samples of epoch 0") != std::string::npos,
                    "unexpected error: ", what);
    LT_WORKER_CHECK(!std::filesystem::exists(record), "a refused resume trained");
    return 0;
  }
  LT_WORKER_CHECK(!per_rank || env_str("LT_RESUME").empty(), "per-rank data resumed on another world size");
  return 0;
}

// Every (epoch, sample) the phases' ranks trained.
std::map<int64_t, std::vector<int64_t>> trained_per_epoch(const std::filesystem::path& dir) {
  std::map<int64_t, std::vector<int64_t>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("samples.", 0) != 0) continue;
    std::ifstream in(entry.path());
    int64_t epoch = 0, sample = 0;
    while (in >> epoch >> sample) out[epoch].push_back(sample);
  }
  return out;
}

// 2 ranks train 2 steps of epoch 0 (8 of 23 samples), 1 process resumes from
// that checkpoint for 3 steps (6 more), 3 ranks resume from its checkpoint
// and train the rest of epoch 0 (9 samples: 3 per rank) and epoch 1. Each
// epoch's trained samples are the 23, each once. Under ddp, and under fsdp
// (FULL_SHARD: its checkpoints resharded from 2 ranks to 1 and from 1 to 3).
void expect_every_sample_once(const std::string& strategy) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_elastic_" + strategy + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string ckpts = (dir / "ckpts").string();
  expect_workers_pass("ElasticPhase", 2, std::chrono::seconds(60),
                      {{"LT_DIR", dir.string()}, {"LT_PHASE", "1"}, {"LT_MAX_STEPS", "2"}, {"LT_STRATEGY", strategy}});
  expect_workers_pass("ElasticPhase", 1, std::chrono::seconds(60),
                      {{"LT_DIR", dir.string()}, {"LT_PHASE", "2"}, {"LT_MAX_STEPS", "5"},
                       {"LT_RESUME", ckpts + "/epoch=0-step=2.ckpt"}});
  expect_workers_pass("ElasticPhase", 3, std::chrono::seconds(60),
                      {{"LT_DIR", dir.string()}, {"LT_PHASE", "3"}, {"LT_MAX_STEPS", "-1"},
                       {"LT_RESUME", ckpts + "/epoch=0-step=5.ckpt"}, {"LT_STRATEGY", strategy}});
  std::vector<int64_t> all(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) all[static_cast<size_t>(i)] = i;
  auto trained = trained_per_epoch(dir);
  ASSERT_EQ(trained.size(), 2u);
  for (auto& [epoch, samples] : trained) {
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples, all) << strategy << ", epoch " << epoch;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST(Elastic, AnEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) { expect_every_sample_once("ddp"); }
TEST(Elastic, AnFsdpEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) { expect_every_sample_once("fsdp"); }

// Per-rank data the run keeps as given (use_distributed_sampler false):
// which samples are left cannot be dealt out on another world size, so a
// resume of its mid-epoch checkpoint on 1 process is refused, naming why.
TEST(Elastic, PerRankDataResumedOnAnotherWorldSizeIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_elastic_refused_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  expect_workers_pass("ElasticPhase", 2, std::chrono::seconds(60),
                      {{"LT_DIR", dir.string()}, {"LT_PHASE", "1"}, {"LT_MAX_STEPS", "2"}, {"LT_PER_RANK", "1"}});
  expect_workers_pass("ElasticPhase", 1, std::chrono::seconds(60),
                      {{"LT_DIR", dir.string()}, {"LT_PHASE", "2"}, {"LT_MAX_STEPS", "5"}, {"LT_PER_RANK", "1"},
                       {"LT_RESUME", (dir / "ckpts" / "epoch=0-step=2.ckpt").string()}});
  std::filesystem::remove_all(dir);
}
