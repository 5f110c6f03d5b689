// A run resumed on another world size mid-epoch (data/epoch_samples.h): every
// sample of the epoch is trained exactly once across the runs. Real worker
// processes, gloo on 127.0.0.1.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <lightning_cpp/lightning.h>

#include "support/multiprocess.h"

using namespace lt::testing;

namespace {

constexpr int64_t kSamples = 23;

// Sample i is the number i; each trained sample's (epoch, step it goes into,
// index) goes to this rank's record file. LT_KILL_AT: rank 0 is killed
// (SIGKILL) in that step, after recording its samples.
class RecordingNet : public lt::LightningModule {
 public:
  explicit RecordingNet(std::string record) : record_(std::move(record)) {
    linear = register_module("linear", torch::nn::Linear(1, 1));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    {
      std::ofstream out(record_, std::ios::app);
      for (int64_t i = 0; i < batch.data.size(0); ++i) {
        out << current_epoch() << " " << global_step() + 1 << " " << batch.data[i][0].item<int64_t>() << "\n";
      }
    }
    if (global_rank() == 0 && global_step() + 1 == env_int("LT_KILL_AT", -1)) ::raise(SIGKILL);
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

// Sample k of kSamples as a stream: the epoch's stream i of n (a rank's
// loader worker's, StreamShard::index() of count()) reads k = i, i + n, ...
class NumberStream : public lt::IterableDataset {
 public:
  std::unique_ptr<lt::ExampleStream> open(int64_t /*epoch*/, const lt::StreamShard& shard) const override {
    struct Numbers : lt::ExampleStream {
      int64_t next_k, step;
      Numbers(int64_t first, int64_t n) : next_k(first), step(n) {}
      std::optional<lt::Batch> next() override {
        if (next_k >= kSamples) return std::nullopt;
        const auto k = static_cast<float>(next_k);
        next_k += step;
        return lt::Batch{torch::full({1}, k), torch::zeros({1})};
      }
    };
    return std::make_unique<Numbers>(shard.index(), shard.count());
  }
  std::optional<int64_t> length(const lt::StreamShard& shard) const override {
    return (kSamples - shard.index() + shard.count() - 1) / shard.count();
  }
};

// One phase: WORLD_SIZE ranks from LT_RESUME (or the start) until LT_MAX_STEPS
// (-1: the end of 2 epochs), a checkpoint after every step.
LT_TEST_WORKER(ElasticPhase) {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const std::string dir = env_str("LT_DIR");
  auto data = torch::arange(kSamples, torch::kFloat).unsqueeze(1);
  auto loader = env_int("LT_STREAM", 0) == 1  // a stream read by 2 loader workers a rank
                    ? std::make_shared<lt::DataLoader>(std::make_shared<NumberStream>(),
                                                       lt::DataLoaderOptions(2).num_workers(2))
                    : std::make_shared<lt::DataLoader>(
                          std::make_shared<lt::TensorDataset>(data, torch::zeros_like(data)),
                          lt::DataLoaderOptions(2).shuffle(true).seed(7).drop_last(env_int("LT_DROP_LAST", 0) == 1));
  if (env_int("LT_BUCKET", 0) == 1) {  // length-bucketed batches: sample i has length i % 5 + 1, up to 6 tokens a batch
    std::vector<int64_t> lengths;
    for (int64_t i = 0; i < kSamples; ++i) lengths.push_back(i % 5 + 1);
    loader->set_batch_sampler(std::make_shared<lt::LengthBucketBatchSampler>(
        lengths, lt::LengthBucketOptions(3).max_tokens(6).bucket_batches(2).seed(7)));
  }
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
        lt::FSDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)).state_dict_type(
            env_str("LT_SHARDED") == "1" ? lt::StateDictType::kSharded : lt::StateDictType::kFull)));
  } else if (world > 1) {
    options.strategy(std::make_shared<lt::DDPStrategy>(
        lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)).uneven_inputs(
            env_int("LT_PAD", 0) == 1 ? lt::UnevenInputs::kPad : lt::UnevenInputs::kJoin)));
  }
  const std::string record = dir + "/samples." + env_str("LT_PHASE") + "." + std::to_string(rank);
  // With drop_last: at a rank's last batch of an epoch, the samples of its
  // shard that no batch took (its partial batch), to dropped.PHASE.RANK.
  auto dropped = std::make_shared<lt::LambdaCallback>();
  dropped->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule& module, const torch::Tensor&,
                                       const lt::Batch&, int64_t batch_idx) {
    if (!loader->options().drop_last() || batch_idx + 1 != loader->size()) return;
    std::vector<int64_t> taken;
    for (int64_t b = 0; b < loader->size(); ++b) {
      for (int64_t i : loader->batch_indices(b)) taken.push_back(i);
    }
    std::ofstream out(dir + "/dropped." + env_str("LT_PHASE") + "." + std::to_string(rank), std::ios::app);
    for (int64_t i : loader->sampler()->indices(module.current_epoch())) {
      if (std::find(taken.begin(), taken.end(), i) == taken.end()) out << module.current_epoch() << " " << i << "\n";
    }
  };
  options.callbacks({options.callbacks()[0], dropped});
  const bool per_rank = env_int("LT_PER_RANK") == 1;  // each rank its own data, as given
  options.use_distributed_sampler(!per_rank);
  lt::Trainer trainer(options);
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

// Every sample the phases' ranks trained, by epoch; of phase p only those of
// steps up to last_step[p] (the step of the checkpoint the next phase resumed
// from: a killed phase trained some after it, which its checkpoint never saw).
std::map<int64_t, std::vector<int64_t>> trained_per_epoch(const std::filesystem::path& dir,
                                                          const std::map<std::string, int64_t>& last_step = {}) {
  std::map<int64_t, std::vector<int64_t>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();  // samples.PHASE.RANK
    if (name.rfind("samples.", 0) != 0) continue;
    const std::string phase = name.substr(8, name.rfind('.') - 8);
    const auto last = last_step.find(phase);
    std::ifstream in(entry.path());
    int64_t epoch = 0, step = 0, sample = 0;
    while (in >> epoch >> step >> sample) {
      if (last == last_step.end() || step <= last->second) out[epoch].push_back(sample);
    }
  }
  return out;
}

// The samples each epoch's finishing ranks dropped (drop_last), by epoch.
std::map<int64_t, std::vector<int64_t>> dropped_per_epoch(const std::filesystem::path& dir) {
  std::map<int64_t, std::vector<int64_t>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("dropped.", 0) != 0) continue;
    std::ifstream in(entry.path());
    int64_t epoch = 0, sample = 0;
    while (in >> epoch >> sample) out[epoch].push_back(sample);
  }
  return out;
}

std::vector<int64_t> every_sample() {
  std::vector<int64_t> all(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) all[static_cast<size_t>(i)] = i;
  return all;
}

// 2 ranks train 2 steps of epoch 0 (8 of 23 samples), 1 process resumes from
// that checkpoint for 3 steps (6 more), 3 ranks resume from its checkpoint
// and train the rest of epoch 0 (9 samples: 3 per rank) and epoch 1. Each
// epoch's trained samples are the 23, each once. `variant` sets ElasticPhase's
// data and strategy: ddp by default; LT_STRATEGY fsdp (FULL_SHARD: its
// checkpoints resharded from 2 ranks to 1 and from 1 to 3; with LT_SHARDED,
// the 2 ranks' checkpoint a sharded one); LT_BUCKET, length-bucketed batches
// (of 1-3 samples: the steps train other counts); LT_STREAM, a stream of known
// length read by 2 loader workers a rank; LT_DROP_LAST, each epoch's trained
// samples and those its finishing ranks dropped (their partial batches) are
// the 23, each once, the dropped fewer than a batch a rank; LT_PAD
// (uneven_inputs: pad), the 23 each once but for the few the shards repeat.
void expect_every_sample_once(const std::string& name, const std::map<std::string, std::string>& variant = {}) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_elastic_" + name + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string ckpts = (dir / "ckpts").string();
  auto with = [&](std::map<std::string, std::string> env) {
    env.insert(variant.begin(), variant.end());
    env["LT_DIR"] = dir.string();
    return env;
  };
  auto set = [&](const char* key) { return variant.count(key) != 0 && variant.at(key) == "1"; };
  const bool drop_last = set("LT_DROP_LAST"), pad = set("LT_PAD");
  expect_workers_pass("ElasticPhase", 2, std::chrono::seconds(60), with({{"LT_PHASE", "1"}, {"LT_MAX_STEPS", "2"}}));
  if (set("LT_SHARDED")) ASSERT_TRUE(lt::is_sharded_checkpoint(ckpts + "/epoch=0-step=2.ckpt"));
  expect_workers_pass("ElasticPhase", 1, std::chrono::seconds(60),
                      with({{"LT_PHASE", "2"}, {"LT_MAX_STEPS", "5"}, {"LT_RESUME", ckpts + "/epoch=0-step=2.ckpt"}}));
  expect_workers_pass("ElasticPhase", 3, std::chrono::seconds(60),
                      with({{"LT_PHASE", "3"}, {"LT_MAX_STEPS", "-1"}, {"LT_RESUME", ckpts + "/epoch=0-step=5.ckpt"}}));
  auto trained = trained_per_epoch(dir);
  const auto dropped = dropped_per_epoch(dir);
  ASSERT_EQ(trained.size(), 2u);
  EXPECT_EQ(!dropped.empty(), drop_last) << "epoch 1's third rank drops its 7th sample with drop_last";
  for (auto& [epoch, samples] : trained) {
    const auto of_epoch = dropped.find(epoch);
    if (of_epoch != dropped.end()) {
      EXPECT_LE(of_epoch->second.size(), 3u) << "epoch " << epoch << ": 3 ranks dropped more than 1 sample each";
      samples.insert(samples.end(), of_epoch->second.begin(), of_epoch->second.end());
    }
    std::sort(samples.begin(), samples.end());
    if (pad) {  // shards padded to the longest by repeating their first samples: 2 ranks 1, 3 ranks up to 2
      const size_t trained_count = samples.size();
      samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
      EXPECT_LE(trained_count - samples.size(), 3u) << "epoch " << epoch << ": more repeats than the padding's";
    }
    EXPECT_EQ(samples, every_sample()) << name << ", epoch " << epoch;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST(Elastic, AnEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) { expect_every_sample_once("ddp"); }
TEST(Elastic, AnFsdpEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) {
  expect_every_sample_once("fsdp", {{"LT_STRATEGY", "fsdp"}});
}
TEST(Elastic, AnFsdpEpochWithShardedCheckpointsResumedOnOneThenThreeRanksTrainsEverySampleOnce) {
  expect_every_sample_once("fsdp_sharded", {{"LT_STRATEGY", "fsdp"}, {"LT_SHARDED", "1"}});
}
TEST(Elastic, ALengthBucketedEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) {
  expect_every_sample_once("bucket", {{"LT_BUCKET", "1"}});
}
TEST(Elastic, AnEpochWithDropLastResumedOnOneThenThreeRanksTrainsEveryKeptSampleOnce) {
  expect_every_sample_once("drop_last", {{"LT_DROP_LAST", "1"}});
}
TEST(Elastic, APaddedEpochResumedOnOneThenThreeRanksTrainsEverySampleOnceButThePadding) {
  expect_every_sample_once("pad", {{"LT_PAD", "1"}});
}
TEST(Elastic, AStreamedEpochResumedOnOneThenThreeRanksTrainsEverySampleOnce) {
  expect_every_sample_once("stream", {{"LT_STREAM", "1"}});
}

// Killed (SIGKILL on rank 0, in a step drawn from a seeded generator) on 2
// ranks, then on 1 process resumed from the newest checkpoint, then on 3
// ranks resumed from its newest (dealing out the rest of epoch 0) and killed
// in their second step, then resumed on 3 ranks again (the rest as it was
// dealt: the same world size) to the end of 2 epochs: the samples of each
// epoch that the checkpoints carried on (a killed run's steps after its last
// checkpoint are lost with it) are the 23, each once. Map-style data
// shuffled under ddp (seed 1) and fsdp with sharded checkpoints (seed 2), a
// stream read by 2 loader workers (seed 3), length-bucketed batches (seed 4).
TEST(Elastic, KilledRunsResumedOnOtherWorldSizesTrainEverySampleOnce) {
  const std::map<unsigned, std::map<std::string, std::string>> data{
      {1u, {}},
      {2u, {{"LT_STRATEGY", "fsdp"}, {"LT_SHARDED", "1"}}},
      {3u, {{"LT_STREAM", "1"}}},
      {4u, {{"LT_BUCKET", "1"}}}};
  for (const auto& [seed, env] : data) {
    std::mt19937 draw(seed);
    const int64_t first = 2 + static_cast<int64_t>(draw() % 2);           // step 2 or 3 of epoch 0's 6 on 2 ranks
    const int64_t second = first + 1 + static_cast<int64_t>(draw() % 2);  // 1-2 steps later, on 1 process
    // The second step on 3 ranks (with batches of 2, epoch 0 has >= 11 samples left there: 2 steps).
    const int64_t third = second + 1;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("lt_elastic_kill_" + std::to_string(seed) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::vector<std::pair<int, int64_t>> killed_phases{{2, first}, {1, second}, {3, third}};
    for (size_t p = 0; p < killed_phases.size(); ++p) {
      WorkerOptions killed;
      killed.timeout = std::chrono::seconds(60);
      killed.env = {{"LT_DIR", dir.string()},
                    {"LT_PHASE", std::to_string(p + 1)},
                    {"LT_MAX_STEPS", "-1"},
                    {"LT_KILL_AT", std::to_string(killed_phases[p].second)},
                    {"LT_RESUME", p == 0 ? "" : "last"}};
      killed.env.insert(env.begin(), env.end());
      const WorkersResult run = run_workers("ElasticPhase", killed_phases[p].first, killed);
      ASSERT_FALSE(run.ok()) << "phase " << p + 1 << " was not killed at step " << killed_phases[p].second << ": "
                             << run.summary();
    }
    std::map<std::string, std::string> last{
        {"LT_DIR", dir.string()}, {"LT_PHASE", "4"}, {"LT_MAX_STEPS", "-1"}, {"LT_RESUME", "last"}};
    last.insert(env.begin(), env.end());
    expect_workers_pass("ElasticPhase", 3, std::chrono::seconds(60), last);
    // Each killed phase's newest checkpoint was its step before the kill.
    auto trained = trained_per_epoch(dir, {{"1", first - 1}, {"2", second - 1}, {"3", third - 1}});
    ASSERT_EQ(trained.size(), 2u) << "seed " << seed;
    for (auto& [epoch, samples] : trained) {
      std::sort(samples.begin(), samples.end());
      EXPECT_EQ(samples, every_sample()) << "seed " << seed << " (killed at steps " << first << ", " << second
                                         << " and " << third << "), epoch " << epoch;
    }
    std::filesystem::remove_all(dir);
  }
}

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
