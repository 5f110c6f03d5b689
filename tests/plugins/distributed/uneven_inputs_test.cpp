// plugins/distributed/uneven_inputs.h under DDP, real worker processes over
// Gloo: uneven_inputs: error refuses before training; per-rank loaders (own
// shards, custom samplers and batch samplers, streams) are kept as given and
// evened out by every uneven_inputs mode, trained like one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/strategies/ddp/ddp_fixture.h"
#include "support/multiprocess.h"
#include "support/row_stream.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using namespace lt::testing::ddp;  // TinyNet, its data and the workers' options (ddp_fixture.h)

// uneven_inputs: error refuses before training when batch counts differ.
LT_TEST_WORKER(UnevenError) {
  const int64_t world = env_int("WORLD_SIZE");
  auto data = make_data(9);  // 2 ranks: 5 and 4 samples -> 3 and 2 batches of 2
  auto net = make_net(-1);
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(std::make_shared<lt::DDPStrategy>(
                              test_strategy_options().uneven_inputs(lt::UnevenInputs::kError)))
                          .max_epochs(1)
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(2));
  try {
    trainer.fit(net, loader);
  } catch (const lt::ValueError& e) {
    const std::string what = e.what();
    std::cerr << what << "\n";
    return what.find("rank 0: 3, rank 1: 2") != std::string::npos ? 0 : 5;
  }
  return 4;  // trained: not refused
}

TEST(Ddp, UnevenInputsErrorRefusesBeforeTraining) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("uneven")}};
  auto r = run_workers("UnevenError", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
}

// -- per-rank data: loaders kept as given, evened out by uneven_inputs ---------------------

// Its own samples (0..n) for the rank that holds it: a sampler DDP keeps.
class OwnSamples : public lt::Sampler {
 public:
  explicit OwnSamples(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> out(n_);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }

 private:
  int64_t n_;
};

// Its own samples in batches of 4: a batch sampler DDP keeps.
class OwnBatches : public lt::BatchSampler {
 public:
  explicit OwnBatches(int64_t n) : n_(n) {}
  std::vector<std::vector<int64_t>> batches(int64_t) const override {
    std::vector<std::vector<int64_t>> out;
    for (int64_t i = 0; i < n_; i += 4) {
      out.emplace_back();
      for (int64_t j = i; j < std::min<int64_t>(i + 4, n_); ++j) out.back().push_back(j);
    }
    return out;
  }

 private:
  int64_t n_;
};

// Rank 0 has 20 samples of its own, rank 1 LT_RANK1 (12: batches of 4, 5 and
// 3), given as a plain loader with use_distributed_sampler false
// (LT_HOW=flag), with a custom sampler (sampler) or batch sampler (batches),
// or as a stream of unknown length (stream); LT_HOW=padded: rank 1's 12
// samples repeated to 20 by hand. LT_K: accumulate_grad_batches. Trains 2 epochs with uneven_inputs LT_MODE; writes
// the final parameters and the samples each rank trained on.
LT_TEST_WORKER(PerRankData) {
  const int64_t rank = env_int("RANK");
  const std::string mode = env_str("LT_MODE"), how = env_str("LT_HOW");
  const int64_t k = env_int("LT_K", 1), rank1 = env_int("LT_RANK1", 12);
  auto data = make_data(32);
  torch::Tensor x = rank == 0 ? data.x.narrow(0, 0, 20) : data.x.narrow(0, 20, rank1);
  torch::Tensor y = rank == 0 ? data.y.narrow(0, 0, 20) : data.y.narrow(0, 20, rank1);
  if (how == "padded" && rank == 1) {
    x = torch::cat({x, x.narrow(0, 0, 8)});
    y = torch::cat({y, y.narrow(0, 0, 8)});
  }
  struct Counting : TinyNet {
    int64_t samples = 0;
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      samples += batch.data.size(0);
      return TinyNet::training_step(batch, batch_idx);
    }
  };
  torch::manual_seed(0);
  auto net = std::make_shared<Counting>();
  const lt::UnevenInputs uneven = mode == "pad" ? lt::UnevenInputs::kPad
                                  : mode == "error" ? lt::UnevenInputs::kError
                                                    : lt::UnevenInputs::kJoin;
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(2)
                          .strategy(std::make_shared<lt::DDPStrategy>(test_strategy_options().uneven_inputs(uneven)))
                          .use_distributed_sampler(how == "sampler" || how == "batches")
                          .accumulate_grad_batches(k)
                          .max_epochs(2)
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto loader = how == "stream"
                    ? std::make_shared<lt::DataLoader>(std::make_shared<lt::testing::RowStream>(x, y),
                                                       lt::DataLoaderOptions(4))
                    : std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                                       lt::DataLoaderOptions(4));
  if (how == "sampler") loader->set_sampler(std::make_shared<OwnSamples>(x.size(0)));
  if (how == "batches") loader->set_batch_sampler(std::make_shared<OwnBatches>(x.size(0)));
  try {
    trainer.fit(net, loader);
  } catch (const lt::ValueError& e) {
    const std::string what = e.what();
    if (how == "stream") {
      LT_WORKER_CHECK(mode != "join" && what.find("is a stream of unknown length") != std::string::npos, what);
      return 0;
    }
    LT_WORKER_CHECK(mode == "error" && what.find("rank 0: 5, rank 1: 3") != std::string::npos, what);
    LT_WORKER_CHECK(trainer.global_step() == 0);
    return 0;
  }
  LT_WORKER_CHECK(mode != "error" && (how != "stream" || mode == "join"), "trained on uneven per-rank data");
  // pad: rank 1 trained on its samples and 8 repeated; join: on its own.
  const int64_t expected = rank == 0 || mode == "pad" || how == "padded" ? 40 : 2 * rank1;
  LT_WORKER_CHECK(net->samples == expected, "rank ", rank, " trained on ", net->samples, " samples");
  LT_WORKER_CHECK(trainer.global_step() == 2 * ((5 + k - 1) / k), trainer.global_step());
  lt::atomic_pickle_save(c10::List<torch::Tensor>(parameter_list(*net)),
                         env_str("LT_OUT") + "/params_" + std::to_string(rank));
  return 0;
}

TEST(Ddp, PerRankDataWithEveryUnevenInputsMode) {
  auto run = [](const std::string& mode, const std::string& how, int k = 1, int rank1 = 12) {
    lt::testing::WorkerOptions options;
    options.env = {{"LT_OUT", out_dir("per_rank_" + mode + "_" + how)}, {"LT_MODE", mode}, {"LT_HOW", how},
                   {"LT_K", std::to_string(k)}, {"LT_RANK1", std::to_string(rank1)}};
    auto r = run_workers("PerRankData", 2, options);
    EXPECT_TRUE(r.ok()) << mode << " " << how << ": " << r.summary();
    std::vector<std::vector<torch::Tensor>> params;
    for (int rank = 0; rank < 2 && mode != "error"; ++rank) {
      const std::string path = options.env["LT_OUT"] + "/params_" + std::to_string(rank);
      if (std::filesystem::exists(path)) params.push_back(lt::tensor_list(lt::pickle_load_file(path)));
    }
    std::filesystem::remove_all(options.env["LT_OUT"]);
    return params;
  };
  auto expect_equal = [](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << what << " " << i;
  };
  for (const char* how : {"flag", "sampler", "batches"}) {
    run("error", how);
    // pad: as if rank 1's data had been repeated by hand; every rank alike.
    const auto padded = run("pad", "padded"), pad = run("pad", how);
    ASSERT_EQ(pad.size(), 2u) << how;
    ASSERT_EQ(padded.size(), 2u);
    expect_equal(pad[0], pad[1], "pad: rank 0 vs rank 1");
    expect_equal(pad[0], padded[0], "pad vs repeated by hand");
    // join (lockstep): every rank alike, and not what padding trains.
    const auto join = run("join", how);
    ASSERT_EQ(join.size(), 2u) << how;
    expect_equal(join[0], join[1], "join: rank 0 vs rank 1");
    EXPECT_FALSE(torch::allclose(join[0][0], pad[0][0])) << how;
  }
}

// Per-rank streams of unknown length train under Join as the same rows
// through map-style loaders (whose Join runs equal the Python oracle,
// join_test): rank 1 with 12 rows (3 batches) or none, accumulating 1 to 3
// (a stream that ends inside a window pads it at run time). pad and error
// need the counts before training and refuse, naming the stream.
TEST(Ddp, PerRankStreamsTrainUnderJoinAsMapStyleLoaders) {
  auto run = [](const std::string& mode, const std::string& how, int k, int rank1) {
    lt::testing::WorkerOptions options;
    options.env = {{"LT_OUT", out_dir("streams_" + mode + "_" + how)}, {"LT_MODE", mode}, {"LT_HOW", how},
                   {"LT_K", std::to_string(k)}, {"LT_RANK1", std::to_string(rank1)}};
    auto r = run_workers("PerRankData", 2, options);
    EXPECT_TRUE(r.ok()) << mode << " " << how << " k=" << k << " rank1=" << rank1 << ": " << r.summary();
    std::vector<std::vector<torch::Tensor>> params;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string path = options.env["LT_OUT"] + "/params_" + std::to_string(rank);
      if (std::filesystem::exists(path)) params.push_back(lt::tensor_list(lt::pickle_load_file(path)));
    }
    std::filesystem::remove_all(options.env["LT_OUT"]);
    return params;
  };
  for (const auto& [k, rank1] : std::vector<std::pair<int, int>>{{1, 12}, {2, 12}, {3, 12}, {2, 0}}) {
    const auto streamed = run("join", "stream", k, rank1), mapped = run("join", "flag", k, rank1);
    ASSERT_EQ(streamed.size(), 2u);
    ASSERT_EQ(mapped.size(), 2u);
    for (int rank = 0; rank < 2; ++rank) {
      for (size_t i = 0; i < mapped[0].size(); ++i) {
        EXPECT_TRUE(streamed[rank][i].equal(mapped[0][i])) << "k=" << k << " rank1=" << rank1 << " rank " << rank;
      }
    }
  }
  EXPECT_TRUE(run("pad", "stream", 1, 12).empty());
  EXPECT_TRUE(run("error", "stream", 1, 12).empty());
}
