// plugins/strategies/ddp with real worker processes and real Gloo on
// 127.0.0.1: gradients averaged exactly as one process training on the union
// of the ranks' batches, no_sync under accumulate_grad_batches,
// find_unused_parameters, bucket rebuilding, buffers; evaluation and
// prediction on uneven shards equal to one process; rank 0's logger version
// on every rank; an unknown Gloo interface named clearly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/distributed_sampler.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/strategies/ddp/ddp_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using namespace lt::testing::ddp;  // TinyNet, its data and the workers' options (ddp_fixture.h)

namespace {

// One process, the same model and permutation: step s, micro-batch m uses,
// for every rank r, the samples the DistributedSampler gives rank r in its
// batch s*k+m; the loss is the mean over ranks (and / k per micro-batch).
std::vector<torch::Tensor> reference_training(int64_t world, int64_t batch, int64_t k, int64_t steps,
                                              int64_t branch_mask, uint64_t seed, int64_t hidden = kHidden) {
  const int64_t n = world * batch * k * steps;
  auto data = make_data(n);
  auto net = make_net(branch_mask, hidden);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr_for(hidden)));
  const auto perm = lt::seeded_permutation(n, seed);
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (int64_t m = 0; m < k; ++m) {
      const int64_t g = s * k + m;
      torch::Tensor loss = torch::zeros({});
      for (int64_t r = 0; r < world; ++r) {
        std::vector<int64_t> idx;
        for (int64_t j = 0; j < batch; ++j) idx.push_back(perm[r + world * (g * batch + j)]);
        auto ii = torch::tensor(idx, torch::kLong);
        loss = loss + torch::mse_loss(net->forward(data.x.index_select(0, ii), net->uses_branch(r)),
                                      data.y.index_select(0, ii));
      }
      (loss / static_cast<double>(world * k)).backward();
    }
    opt.step();
  }
  return parameter_list(*net);
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what,
                  double atol = 1e-5) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, atol))
        << what << ": tensor " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
  }
}

// Trains TinyNet under DDP with parameters from the environment and saves,
// per rank: [parameters..., counter buffer, number of buckets, buckets rebuilt,
// every micro-batch's fc1 gradient...] to $LT_OUT/rank<r>.pt.
int train_and_save() {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  const int64_t batch = env_int("LT_B", 4), k = env_int("LT_K", 1), steps = env_int("LT_STEPS", 5);
  const int64_t mask = env_int("LT_MASK", -1);
  auto data = make_data(world * batch * k * steps);
  auto net = make_net(mask, env_int("LT_HIDDEN", kHidden));
  auto strategy = std::make_shared<lt::DDPStrategy>(
      test_strategy_options()
          .find_unused_parameters(env_int("LT_FIND_UNUSED") != 0)
          .gradient_as_bucket_view(env_int("LT_BUCKET_VIEW") != 0)
          .bucket_cap_mb(std::atof(env_str("LT_BUCKET_CAP_MB", "25").c_str())));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(batch).shuffle(true).seed(7));
  int64_t buckets = -1, rebuilt = -1;
  struct Probe : lt::Callback {
    int64_t* buckets = nullptr;
    int64_t* rebuilt = nullptr;
    lt::DDPStrategy* strategy = nullptr;
    std::string name() const override { return "Probe"; }
    void on_train_end(lt::Trainer&, lt::LightningModule&) override {
      *buckets = static_cast<int64_t>(strategy->ddp()->bucket_indices().size());
      *rebuilt = strategy->ddp()->has_rebuilt_buckets() ? 1 : 0;
    }
  };
  auto probe = std::make_shared<Probe>();
  probe->buckets = &buckets;
  probe->rebuilt = &rebuilt;
  probe->strategy = strategy.get();
  strategy->options().uneven_inputs(lt::UnevenInputs::kPad);
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(strategy)
                          .max_epochs(1)
                          .accumulate_grad_batches(k)
                          .num_sanity_val_steps(0)
                          .enable_progress_bar(false)
                          .callbacks({probe})
                          .default_root_dir(env_str("LT_OUT")));
  trainer.fit(net, loader);
  auto out = parameter_list(*net);
  out.push_back(net->counter.clone());
  out.push_back(torch::tensor({buckets}));
  out.push_back(torch::tensor({rebuilt}));
  for (auto& g : net->grads) out.push_back(g);
  torch::save(out, env_str("LT_OUT") + "/rank" + std::to_string(rank) + ".pt");
  return 0;
}

struct TrainCase {
  int world = 2;
  int64_t batch = 4, k = 1, steps = 5, mask = -1;
  int64_t hidden = kHidden;
  bool find_unused = false, bucket_view = false;
  std::string bucket_cap_mb = "25";
};

// Runs train_and_save on `world` ranks; returns each rank's saved tensors.
std::vector<std::vector<torch::Tensor>> run_training(const std::string& name, const TrainCase& c) {
  const std::string dir = out_dir(name);
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"LT_OUT", dir},
                 {"LT_B", std::to_string(c.batch)},
                 {"LT_K", std::to_string(c.k)},
                 {"LT_STEPS", std::to_string(c.steps)},
                 {"LT_MASK", std::to_string(c.mask)},
                 {"LT_FIND_UNUSED", c.find_unused ? "1" : "0"},
                 {"LT_BUCKET_VIEW", c.bucket_view ? "1" : "0"},
                 {"LT_BUCKET_CAP_MB", c.bucket_cap_mb},
                 {"LT_HIDDEN", std::to_string(c.hidden)}};
  auto r = run_workers("TrainAndSave", c.world, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::vector<std::vector<torch::Tensor>> out;
  if (!r.ok()) return out;
  for (int rank = 0; rank < c.world; ++rank) out.push_back(load_tensors(dir + "/rank" + std::to_string(rank) + ".pt"));
  std::filesystem::remove_all(dir);
  return out;
}

constexpr size_t kNumParams = 6;  // fc1, fc2, branch: weight + bias

std::vector<torch::Tensor> params_of(const std::vector<torch::Tensor>& saved) {
  return {saved.begin(), saved.begin() + kNumParams};
}

void check_against_reference(const TrainCase& c, const std::vector<std::vector<torch::Tensor>>& ranks) {
  ASSERT_EQ(static_cast<int>(ranks.size()), c.world);
  const auto reference = reference_training(c.world, c.batch, c.k, c.steps, c.mask, /*seed=*/7, c.hidden);
  for (int r = 0; r < c.world; ++r) {
    // Every rank applied the same averaged gradient: bitwise equal.
    expect_equal(params_of(ranks[r]), params_of(ranks[0]), "rank " + std::to_string(r) + " vs rank 0");
    expect_close(params_of(ranks[r]), reference, "rank " + std::to_string(r) + " vs one process on the union");
  }
  // The start was not already the answer.
  EXPECT_FALSE(torch::allclose(reference[0], reference_training(c.world, c.batch, c.k, 0, c.mask, 7, c.hidden)[0]));
}

}  // namespace

LT_TEST_WORKER(TrainAndSave) { return train_and_save(); }

TEST(Ddp, TwoRanksTrainLikeOneProcessOnTheUnion) {
  TrainCase c;
  c.world = 2;
  auto ranks = run_training("two", c);
  check_against_reference(c, ranks);
  if (ranks.size() == 2) {
    // One bucket in the first iteration, rebuilt after it (PyTorch 1.13).
    EXPECT_EQ(ranks[0][kNumParams + 2].item<int64_t>(), 1) << "buckets rebuilt";
    // broadcast_buffers: before each forward every rank takes rank 0's
    // counter, then adds rank+1: steps-1 from rank 0, plus its own last add.
    EXPECT_EQ(ranks[0][kNumParams].item<float>(), 5.0f);
    EXPECT_EQ(ranks[1][kNumParams].item<float>(), 4.0f + 2.0f);
  }
}

TEST(Ddp, ThreeRanksTrainLikeOneProcessOnTheUnion) {
  TrainCase c;
  c.world = 3;
  c.batch = 3;
  c.steps = 4;
  check_against_reference(c, run_training("three", c));
}

TEST(Ddp, AccumulationSyncsOnlyOnTheStepBoundary) {
  for (int world : {2, 3}) {
    TrainCase c;
    c.world = world;
    c.k = 3;
    c.steps = 3;
    auto ranks = run_training("accumulate" + std::to_string(world), c);
    check_against_reference(c, ranks);
    if (static_cast<int>(ranks.size()) != world) continue;
    // Gradients recorded after each micro-batch's backward: under no_sync
    // (micro-batches 0 and 1 of each window) they are this rank's own and
    // differ between ranks; after the window's last one they are reduced
    // and identical.
    const size_t first_grad = kNumParams + 3;
    ASSERT_EQ(ranks[0].size(), first_grad + static_cast<size_t>(c.k * c.steps));
    for (int64_t it = 0; it < c.k * c.steps; ++it) {
      const bool synced = (it + 1) % c.k == 0;
      for (int r = 1; r < world; ++r) {
        EXPECT_EQ(torch::equal(ranks[r][first_grad + it], ranks[0][first_grad + it]), synced)
            << "world " << world << " micro-batch " << it << " rank " << r;
      }
    }
  }
}

TEST(Ddp, RebuiltBucketsAndGradientAsBucketView) {
  TrainCase c;
  c.world = 2;
  // One bucket in the first iteration; after the rebuild (in gradient-ready
  // order, whole tensors) fc2.weight (1.1 MB) fills the first bucket (1 MiB,
  // c10d's kDefaultFirstBucketBytes), branch.* and fc1.bias (0.28 MB) a
  // second of 0.25 MB, fc1.weight (2.2 MB) a third.
  c.hidden = 70000;
  c.bucket_cap_mb = "0.25";
  c.bucket_view = true;
  c.steps = 4;
  auto ranks = run_training("buckets", c);
  check_against_reference(c, ranks);
  if (ranks.size() == 2) {
    EXPECT_EQ(ranks[0][kNumParams + 2].item<int64_t>(), 1) << "buckets rebuilt";
    EXPECT_GE(ranks[0][kNumParams + 1].item<int64_t>(), 3) << "number of buckets";
  }
}

TEST(Ddp, FindUnusedParametersWithABranchUnusedOnOneRank) {
  TrainCase c;
  c.world = 2;
  c.mask = 0b01;  // rank 0 uses the branch, rank 1 does not
  c.find_unused = true;
  auto ranks = run_training("unused", c);
  check_against_reference(c, ranks);
  if (ranks.size() == 2) {
    // The branch moved (rank 0's gradient, halved), identically on both ranks.
    auto start = make_net(0);
    EXPECT_FALSE(torch::allclose(ranks[1][4], start->branch->weight));
  }
}

TEST(Ddp, UnusedBranchWithoutFindUnusedParametersFailsClearly) {
  TrainCase c;
  c.world = 2;
  c.mask = 0b01;
  c.steps = 3;
  const std::string dir = out_dir("unused_error");
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"LT_OUT", dir}, {"LT_MASK", "1"}, {"LT_STEPS", "3"}};
  auto r = run_workers("TrainAndSave", 2, options);
  EXPECT_FALSE(r.ok());
  // The rank whose branch got no gradient fails at its next forward with
  // the Reducer's message pointing at find_unused_parameters.
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_NE(r.outputs[1].find("find_unused_parameters=True"), std::string::npos) << r.summary();
  std::filesystem::remove_all(dir);
}

// Evaluation and prediction shard without padding, so ranks may run
// different numbers of batches (or none); the results are still one
// process's: every sample counted once, predictions in dataset order.
class EvalNet : public TinyNet {
 public:
  EvalNet() : TinyNet(-1) {}
  torch::Tensor per_sample(const lt::Batch& batch) {
    return torch::mse_loss(forward(batch.data, true), batch.target, torch::Reduction::None).mean(1);
  }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    const torch::Tensor losses = per_sample(batch);
    log("val_loss", losses.mean(), lt::LogOptions().sync_dist(true));
    log("samples", static_cast<double>(batch.data.size(0)),
        lt::LogOptions().sync_dist(true).reduce_fx(lt::ReduceOp::kSum));
    log("worst", losses.max(), lt::LogOptions().sync_dist(true).reduce_fx(lt::ReduceOp::kMax));
    if (log_per_step) log("step_loss", losses.mean(), lt::LogOptions().sync_dist(true).on_step(true));
  }
  torch::Tensor predict_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return forward(batch.data, true);
  }
  bool log_per_step = false;
};

LT_TEST_WORKER(ExactUnevenEvaluation) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  auto strategy = std::make_shared<lt::DDPStrategy>(test_strategy_options());
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(strategy)
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto loader_of = [](const Data& data) {
    return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                            lt::DataLoaderOptions(3));
  };
  for (const int64_t n : {10, 2}) {
    // 10 samples on 3 ranks: 4, 3, 3 -> 2, 1, 1 batches of 3; 2 samples: rank 2 has none.
    const Data data = make_data(n);
    torch::manual_seed(0);
    auto net = std::make_shared<EvalNet>();
    const torch::Tensor expected = net->per_sample(lt::Batch{data.x, data.y}).detach();
    const auto metrics = trainer.validate(net, loader_of(data));
    LT_WORKER_CHECK(metrics.count("val_loss") == 1, "n=", n, ": rank ", rank, " has no val_loss");
    LT_WORKER_CHECK(std::abs(metrics.at("val_loss") - expected.mean().item<double>()) < 1e-6, "n=", n, ": val_loss ",
                    metrics.at("val_loss"), ", one process: ", expected.mean().item<double>());
    LT_WORKER_CHECK(metrics.at("samples") == static_cast<double>(n), "n=", n, ": ", metrics.at("samples"),
                    " samples counted");
    LT_WORKER_CHECK(std::abs(metrics.at("worst") - expected.max().item<double>()) < 1e-6, "n=", n, ": worst ",
                    metrics.at("worst"));

    const auto predictions = trainer.predict(net, loader_of(data));
    const auto reference = net->forward(data.x, true).detach().split(3);
    LT_WORKER_CHECK(predictions.size() == reference.size(), "n=", n, ": ", predictions.size(), " prediction batches");
    for (size_t i = 0; i < reference.size(); ++i) {
      LT_WORKER_CHECK(predictions[i].sizes() == reference[i].sizes() && predictions[i].allclose(reference[i], 1e-5),
                      "n=", n, ": prediction batch ", i, " differs from one process's");
    }
  }
  // A per-step reduction cannot be matched when the ranks' batch counts differ: refused, naming them.
  auto net = std::make_shared<EvalNet>();
  net->log_per_step = true;
  try {
    trainer.validate(net, loader_of(make_data(10)));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("log('step_loss', on_step=true, sync_dist=true) in validate: the ranks run different "
                              "numbers of batches (rank 0: 2, rank 1: 1, rank 2: 1)") != std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "a per-step sync_dist value on uneven batches was not refused");
  return 1;
}

TEST(Ddp, UnevenEvaluationAndPredictionEqualOneProcess) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("exact_eval")}};
  auto r = run_workers("ExactUnevenEvaluation", 3, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
}

// Every rank writes to rank 0's logger version: rank 1 starts after rank 0
// created version_0, so by itself it would pick version_1.
LT_TEST_WORKER(AgreedLogDir) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  const std::string dir = env_str("LT_OUT");
  auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir));
  if (rank == 0) {
    std::filesystem::create_directories(logger->log_dir());
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  auto checkpoint = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(std::make_shared<lt::DDPStrategy>(test_strategy_options()))
                          .max_epochs(1)
                          .enable_progress_bar(false)
                          .logger(logger)
                          .callbacks({checkpoint})
                          .default_root_dir(dir));
  auto data = make_data(16);
  trainer.fit(make_net(-1), std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                             lt::DataLoaderOptions(4)));
  const auto paths = trainer.strategy().all_gather_bytes(checkpoint->best_model_path());
  LT_WORKER_CHECK(paths.at(0) == paths.at(1), "best_model_path differs: '", paths[0], "' and '", paths[1], "'");
  LT_WORKER_CHECK(std::filesystem::exists(paths[0]), paths[0], " does not exist");
  LT_WORKER_CHECK(paths[0].find("version_0") != std::string::npos, paths[0]);
  return 0;
}

TEST(Ddp, EveryRankUsesRankZerosLoggerVersion) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("log_dir")}};
  auto r = run_workers("AgreedLogDir", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
}

// A GLOO_SOCKET_IFNAME that names no interface of this host: a clear error naming the ones there are.
LT_TEST_WORKER(UnknownGlooInterface) {
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(env_int("WORLD_SIZE"))
                          .strategy(std::make_shared<lt::DDPStrategy>(test_strategy_options()))
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto data = make_data(8);
  try {
    trainer.fit(make_net(-1), std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                               lt::DataLoaderOptions(4)));
  } catch (const lt::ValueError& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("GLOO_SOCKET_IFNAME=lt_nope0: this host has no interface 'lt_nope0'") !=
                            std::string::npos &&
                        what.find("it has: lo") != std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "an unknown GLOO_SOCKET_IFNAME was accepted");
  return 1;
}

TEST(Ddp, AnUnknownGlooInterfaceIsAClearErrorNamingTheInterfaces) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("ifname")}, {"GLOO_SOCKET_IFNAME", "lt_nope0"}};
  auto r = run_workers("UnknownGlooInterface", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
}
