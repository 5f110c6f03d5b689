// The DDP strategy with real worker processes and real Gloo on 127.0.0.1:
// gradients averaged exactly as one process training on the union of the
// ranks' batches, no_sync under accumulate_grad_batches, find_unused_parameters,
// bucket rebuilding, buffers, the collectives, uneven-input refusal, and the
// local spawn (success, and a crashing worker).
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <utility>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/data/distributed_sampler.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/row_stream.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;

namespace {

constexpr int64_t kIn = 8, kHidden = 16, kOut = 4;

// A small regression net with an optional branch and a buffer. `branch_mask`
// bit r: rank r adds branch(x) to its output (a branch unused on the other
// ranks); -1: every rank uses it.
class TinyNet : public lt::LightningModule {
 public:
  explicit TinyNet(int64_t branch_mask = -1, int64_t hidden = kHidden, double lr = 0.1)
      : branch_mask_(branch_mask), lr_(lr) {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, kOut));
    branch = register_module("branch", torch::nn::Linear(kIn, kOut));
    counter = register_buffer("counter", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_branch) {
    auto y = fc2(torch::tanh(fc1(x)));
    return use_branch ? y + branch(x) : y;
  }
  bool uses_branch(int64_t rank) const { return ((branch_mask_ >> rank) & 1) != 0; }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    {
      torch::NoGradGuard no_grad;
      counter.add_(static_cast<double>(global_rank() + 1));  // differs per rank: shows the buffer broadcast
    }
    return torch::mse_loss(forward(batch.data, uses_branch(global_rank())), batch.target);
  }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    log("val_loss", torch::mse_loss(forward(batch.data, uses_branch(global_rank())), batch.target),
        lt::LogOptions().sync_dist(true));
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_));
  }
  void on_after_backward() override {
    // Records every micro-batch's gradient of fc1.weight (the tests compare ranks).
    grads.push_back(fc1->weight.grad().defined() ? fc1->weight.grad().clone() : torch::zeros_like(fc1->weight));
  }

  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, branch{nullptr};
  torch::Tensor counter;
  std::vector<torch::Tensor> grads;

 private:
  int64_t branch_mask_;
  double lr_;
};

struct Data {
  torch::Tensor x, y;
};

Data make_data(int64_t n) {
  auto gen = at::detail::createCPUGenerator(123);
  return {torch::randn({n, kIn}, gen), torch::randn({n, kOut}, gen)};
}

std::shared_ptr<TinyNet> make_net(int64_t branch_mask, int64_t hidden = kHidden) {
  torch::manual_seed(0);
  return std::make_shared<TinyNet>(branch_mask, hidden);
}

std::vector<torch::Tensor> parameter_list(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// One process, the same model and permutation: step s, micro-batch m uses,
// for every rank r, the samples the DistributedSampler gives rank r in its
// batch s*k+m; the loss is the mean over ranks (and / k per micro-batch).
std::vector<torch::Tensor> reference_training(int64_t world, int64_t batch, int64_t k, int64_t steps,
                                              int64_t branch_mask, uint64_t seed, int64_t hidden = kHidden) {
  const int64_t n = world * batch * k * steps;
  auto data = make_data(n);
  auto net = make_net(branch_mask, hidden);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
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

lt::DDPStrategyOptions test_strategy_options() {
  return lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(20));
}

std::string out_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("lt_ddp_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<torch::Tensor> load_tensors(const std::string& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path);
  return t;
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what,
                  double atol = 1e-5) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, atol))
        << what << ": tensor " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
  }
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << ": tensor " << i;
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

// -- collectives ------------------------------------------------------------------

LT_TEST_WORKER(Collectives) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  lt::DDPStrategy s(test_strategy_options());
  s.setup_environment(lt::TrainerOptions().devices(world));
  const double x = static_cast<double>(rank + 1);
  const double sum = world * (world + 1) / 2.0;
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kSum).item<double>() == sum, "sum");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMean).item<double>() == sum / world, "mean");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMin).item<double>() == 1.0, "min");
  LT_WORKER_CHECK(s.reduce(torch::tensor(x), lt::ReduceOp::kMax).item<double>() == static_cast<double>(world), "max");
  LT_WORKER_CHECK(s.reduce(torch::tensor(rank + 1), lt::ReduceOp::kMean).item<double>() == sum / world, "integer mean");
  auto gathered = s.all_gather(torch::full({2}, rank));
  LT_WORKER_CHECK(gathered.sizes() == torch::IntArrayRef({world, 2}), "all_gather shape");
  for (int64_t r = 0; r < world; ++r) LT_WORKER_CHECK(gathered[r][1].item<int64_t>() == r, "all_gather value");
  LT_WORKER_CHECK(s.broadcast(torch::tensor({rank * 10}), 1).item<int64_t>() == 10, "broadcast");
  s.barrier("test");
  LT_WORKER_CHECK(s.reduce_boolean_decision(true, true), "all true");
  LT_WORKER_CHECK(!s.reduce_boolean_decision(rank == 0, true), "all with one false");
  LT_WORKER_CHECK(s.reduce_boolean_decision(rank == 0, false), "any with one true");
  LT_WORKER_CHECK(!s.reduce_boolean_decision(false, false), "any all false");
  bool refused = false;
  try {
    s.all_gather(torch::zeros({rank + 1}));
  } catch (const lt::Error&) {
    refused = true;
  }
  LT_WORKER_CHECK(refused, "all_gather of different shapes must throw on every rank");
  return 0;
}

// Ranks on one node share its CPUs (Lightning's _set_num_threads_if_needed):
// where OMP_NUM_THREADS is not set, a rank whose LibTorch would run 4 threads
// (a machine's default is one per core) runs at most CPUs / ranks; where it is
// set, the user's count stays.
LT_TEST_WORKER(RanksShareTheCpus) {
  const int64_t world = env_int("WORLD_SIZE");
  const bool user_set = env_int("RANK") == 1;
  if (!user_set) ::unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(4);
  lt::DDPStrategy s(test_strategy_options());
  s.setup_environment(lt::TrainerOptions().devices(world));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  LT_WORKER_CHECK(::sched_getaffinity(0, sizeof cpus, &cpus) == 0, "sched_getaffinity");
  const int share = std::max<int>(1, CPU_COUNT(&cpus) / static_cast<int>(world));
  const int expected = user_set ? 4 : std::min(4, share);
  LT_WORKER_CHECK(at::get_num_threads() == expected, "threads ", at::get_num_threads(), ", expected ", expected);
  return 0;
}

TEST(Ddp, RanksOnANodeShareItsCpus) {
  lt::testing::WorkerOptions options;
  options.rank_env = {{}, {{"OMP_NUM_THREADS", "4"}}};
  auto r = run_workers("RanksShareTheCpus", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Ddp, CollectivesOnThreeRanks) {
  auto r = run_workers("Collectives", 3);
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Validation with sync_dist: every rank ends with the same (global) value.
LT_TEST_WORKER(SyncDistValidation) {
  const int64_t world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  auto data = make_data(30);  // 30 / 3 ranks = 10 each, batches of 4: 3 batches each
  auto net = make_net(-1);
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(world)
                          .strategy(std::make_shared<lt::DDPStrategy>(test_strategy_options()))
                          .enable_progress_bar(false)
                          .default_root_dir(env_str("LT_OUT")));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(4));
  auto metrics = trainer.validate(net, loader);
  const double mine = metrics.at("val_loss");
  auto all = trainer.strategy().all_gather(torch::tensor({mine}, torch::kDouble)).flatten();
  for (int64_t r = 0; r < world; ++r) {
    LT_WORKER_CHECK(all[r].item<double>() == mine, "val_loss differs from rank ", r);
  }
  return 0;
}

TEST(Ddp, SyncDistValidationAgreesOnEveryRank) {
  lt::testing::WorkerOptions options;
  options.env = {{"LT_OUT", out_dir("syncdist")}};
  auto r = run_workers("SyncDistValidation", 3, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  std::filesystem::remove_all(options.env["LT_OUT"]);
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

// -- a signal on one rank: every rank stops after the same window ------------------------

// Two ranks, accumulate_grad_batches 2. LT_MODE pad: 8 batches of 4 on each
// rank; join: rank 0 has 3 batches of its own, rank 1 10 (lockstep Join, on
// a schedule). Rank LT_SIGNAL_RANK raises SIGTERM before its LT_AT-th
// backward (LT_WHEN=backward) or after the optimizer step that reaches global
// step LT_AT (LT_WHEN=step; under Join a joined rank runs that hook too). The
// fit must end with lt::Interrupted at global step LT_EXPECT on every rank,
// with equal parameters. LT_DDP: bucket_view (gradient_as_bucket_view) or
// find_unused (find_unused_parameters).
LT_TEST_WORKER(OneRankSignal) {
  const int64_t rank = env_int("RANK"), at = env_int("LT_AT"), expect = env_int("LT_EXPECT");
  const bool join = env_str("LT_MODE") == "join", raises = rank == env_int("LT_SIGNAL_RANK");
  auto signal = std::make_shared<lt::LambdaCallback>();
  auto backwards = std::make_shared<int64_t>(0);
  if (raises && env_str("LT_WHEN") == "backward") {
    signal->on_before_backward_fn = [backwards, at](lt::Trainer&, lt::LightningModule&, const torch::Tensor&) {
      if (++*backwards == at) ::raise(SIGTERM);
    };
  } else if (raises) {
    signal->on_after_optimizer_step_fn = [at](lt::Trainer& trainer, lt::LightningModule&) {
      if (trainer.global_step() == at) ::raise(SIGTERM);
    };
  }
  auto data = make_data(64);
  const int64_t begin = join ? (rank == 0 ? 0 : 12) : 0, count = join ? (rank == 0 ? 12 : 40) : 64;
  auto loader = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(data.x.narrow(0, begin, count), data.y.narrow(0, begin, count)),
      lt::DataLoaderOptions(4));
  auto net = make_net(-1);
  lt::Trainer trainer(
      lt::TrainerOptions()
          .devices(2)
          .strategy(std::make_shared<lt::DDPStrategy>(
              test_strategy_options()
                  .uneven_inputs(join ? lt::UnevenInputs::kJoin : lt::UnevenInputs::kPad)
                  .gradient_as_bucket_view(env_str("LT_DDP") == "bucket_view")
                  .find_unused_parameters(env_str("LT_DDP") == "find_unused")))
          .use_distributed_sampler(!join)
          .accumulate_grad_batches(2)
          .max_epochs(1)
          .enable_progress_bar(false)
          .callbacks({signal})
          .default_root_dir(env_str("LT_OUT")));
  try {
    trainer.fit(net, loader);
    LT_WORKER_CHECK(false, "rank ", rank, " finished the fit at global step ", trainer.global_step());
  } catch (const lt::Interrupted& e) {
    LT_WORKER_CHECK(trainer.global_step() == expect, "rank ", rank, " stopped at global step ",
                    trainer.global_step(), ": ", e.what());
  }
  lt::atomic_pickle_save(c10::List<torch::Tensor>(parameter_list(*net)),
                         env_str("LT_OUT") + "/params_" + std::to_string(rank));
  return 0;
}

// The gradient allreduce carries the wish: a signal that arrives before the
// window's synced backward stops every rank after that window (through the
// store it took one window more); one that arrives after it, after the next.
// A joined rank's wish rides in its zero bucket.
TEST(Ddp, OneRanksSignalStopsEveryRankAfterTheSameWindow) {
  struct Case {
    const char* mode;
    int signal_rank;
    const char* when;
    int at, expect;
    const char* ddp = "";
  };
  for (const Case& c : {Case{"pad", 1, "backward", 6, 3},  // batch 5 ends window 2 (step 3)
                        Case{"pad", 0, "backward", 5, 3},  // batch 4: no_sync, the wish waits for batch 5
                        Case{"pad", 0, "step", 2, 3},
                        Case{"join", 1, "backward", 8, 4},  // rank 0 joined after step 2
                        Case{"join", 0, "step", 3, 4},      // rank 0 signals while joined
                        Case{"pad", 1, "backward", 6, 3, "bucket_view"},
                        Case{"join", 0, "step", 3, 4, "bucket_view"},
                        Case{"pad", 1, "backward", 6, 3, "find_unused"},
                        Case{"join", 0, "step", 3, 4, "find_unused"}}) {
    const std::string what =
        c10::str(c.mode, " ", c.ddp, ", rank ", c.signal_rank, " before backward/after step ", c.at);
    lt::testing::WorkerOptions options;
    options.env = {{"LT_OUT", out_dir("one_rank_signal")}, {"LT_MODE", c.mode},
                   {"LT_SIGNAL_RANK", std::to_string(c.signal_rank)}, {"LT_WHEN", c.when},
                   {"LT_AT", std::to_string(c.at)}, {"LT_EXPECT", std::to_string(c.expect)},
                   {"LT_DDP", c.ddp}};
    auto r = run_workers("OneRankSignal", 2, options);
    EXPECT_TRUE(r.ok()) << what << ": " << r.summary();
    if (r.ok()) {
      const auto p0 = lt::tensor_list(lt::pickle_load_file(options.env["LT_OUT"] + "/params_0"));
      const auto p1 = lt::tensor_list(lt::pickle_load_file(options.env["LT_OUT"] + "/params_1"));
      ASSERT_EQ(p0.size(), p1.size());
      for (size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(p0[i].equal(p1[i])) << what << ": parameter " << i;
    }
    std::filesystem::remove_all(options.env["LT_OUT"]);
  }
}

// -- local spawn: the Trainer launches the workers ---------------------------------------

// Runs once as the supervisor (no RANK) and once per worker (the supervisor
// re-executes this binary with the same LT_TEST_WORKER). A worker records
// its pid; LT_CRASH_RANK crashes that rank at its third batch.
LT_TEST_WORKER(LocalSpawn) {
  const int devices = env_int("LT_DEVICES", 2);
  const int crash_rank = env_int("LT_CRASH_RANK", -1);
  struct Crashing : TinyNet {
    int crash_rank;
    torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
      if (global_rank() == crash_rank && batch_idx == 2) std::abort();
      return TinyNet::training_step(batch, batch_idx);
    }
  };
  torch::manual_seed(0);
  auto net = std::make_shared<Crashing>();
  net->crash_rank = crash_rank;
  auto data = make_data(64);
  const std::string dir = env_str("LT_OUT");
  lt::Trainer trainer(lt::TrainerOptions()
                          .devices(devices)
                          .strategy(std::make_shared<lt::DDPStrategy>(
                              lt::DDPStrategyOptions()
                                  .process_group_timeout(std::chrono::seconds(60))
                                  .worker_log_dir(env_str("LT_WORKER_LOG_DIR"))))
                          .max_epochs(2)
                          .enable_progress_bar(false)
                          .default_root_dir(dir));
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                 lt::DataLoaderOptions(4).shuffle(true));
  // Only the workers get here before fit's launch; the supervisor has no rank yet.
  if (std::getenv("RANK") != nullptr) {
    std::ofstream(dir + "/pid" + lt::testing::env_str("RANK")) << ::getpid();
  }
  trainer.fit(net, loader);  // in the supervisor: launches, waits, std::exit
  std::vector<torch::Tensor> params = parameter_list(*net);
  torch::save(params, dir + "/rank" + env_str("RANK") + ".pt");
  return 0;
}

namespace {

struct SpawnResult {
  lt::WorkerExit exit;
  std::string output;
  double seconds = 0;
};

// Starts this binary as a supervisor (no rank variables) running LocalSpawn.
SpawnResult run_supervisor(const std::string& dir, std::map<std::string, std::string> env) {
  env["LT_TEST_WORKER"] = "LocalSpawn";
  env["LT_OUT"] = dir;
  lt::WorkerSpec spec;
  spec.argv = {lt::self_executable()};
  spec.env = env;
  spec.output_path = dir + "/supervisor.log";
  // The test binary's own environment has no RANK (ctest does not set one);
  // make sure the supervisor does not inherit one from a caller.
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LT_LOCAL_SPAWN", "MASTER_PORT"}) {
    EXPECT_EQ(std::getenv(k), nullptr) << k << " is set in the test's environment";
  }
  const auto start = std::chrono::steady_clock::now();
  auto exits = lt::launch_and_wait({spec}, lt::LaunchOptions{std::chrono::seconds(90)});
  SpawnResult out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit = exits.at(0);
  std::ifstream in(spec.output_path);
  std::stringstream ss;
  ss << in.rdbuf();
  out.output = ss.str();
  return out;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

TEST(LocalSpawn, SupervisorLaunchesWorkersAndExitsZero) {
  const std::string dir = out_dir("spawn_ok");
  auto r = run_supervisor(dir, {{"LT_DEVICES", "2"}});
  EXPECT_TRUE(r.exit.ok()) << r.exit.describe() << "\n" << r.output;
  if (r.exit.ok()) {
    auto p0 = load_tensors(dir + "/rank0.pt"), p1 = load_tensors(dir + "/rank1.pt");
    expect_equal(p0, p1, "local spawn rank 1 vs rank 0");
  }
  std::filesystem::remove_all(dir);
}

// A worker_log_dir that cannot be created fails the launch naming it, and
// leaves no rendezvous folder behind in TMPDIR (it was made first).
TEST(LocalSpawn, AnUncreatableWorkerLogDirLeavesNothingBehind) {
  const std::string dir = out_dir("spawn_logdir");
  const std::string tmp = dir + "/tmp";
  std::filesystem::create_directories(tmp);
  auto r = run_supervisor(dir, {{"LT_WORKER_LOG_DIR", "/dev/null/logs"}, {"TMPDIR", tmp}});
  EXPECT_FALSE(r.exit.ok());
  EXPECT_NE(r.output.find("local spawn: worker_log_dir '/dev/null/logs' cannot be created: Not a directory"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "a rendezvous folder was left in " << tmp;
  std::filesystem::remove_all(dir);
}

// A plain run in a shell that still holds RANK=1 WORLD_SIZE=2 MASTER_* from
// an earlier launch: no peer ever comes. The error says who waited for
// whom, where, and the likely cause (it was c10d's bare socket timeout).
LT_TEST_WORKER(StaleEnvironment) {
  lt::Trainer trainer(lt::TrainerOptions().enable_progress_bar(false).default_root_dir(env_str("LT_OUT")).strategy(
      std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(2)))));
  auto data = make_data(8);
  try {
    trainer.fit(make_net(-1), std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data.x, data.y),
                                                               lt::DataLoaderOptions(4)));
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("rendezvous: rank 1 of 2 (") != std::string::npos &&
                        what.find("waited 2 s for the store at 127.0.0.1:" + env_str("MASTER_PORT") +
                                  " that rank 0 hosts") != std::string::npos &&
                        what.find("left in the environment by an earlier launch") != std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "trained without peers");
  return 1;
}

TEST(Rendezvous, AStaleRankEnvironmentSaysWhoWaitedForWhom) {
  const std::string dir = out_dir("stale_env");
  lt::WorkerSpec spec;
  spec.argv = {lt::self_executable()};
  spec.env = {{"LT_TEST_WORKER", "StaleEnvironment"}, {"LT_OUT", dir},           {"RANK", "1"},
              {"WORLD_SIZE", "2"},                    {"LOCAL_RANK", "1"},       {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(lt::find_free_port())}};
  spec.output_path = dir + "/out.log";
  auto exits = lt::launch_and_wait({spec}, lt::LaunchOptions{std::chrono::seconds(60)});
  std::ifstream in(spec.output_path);
  std::stringstream output;
  output << in.rdbuf();
  EXPECT_TRUE(exits.at(0).ok()) << exits.at(0).describe() << "\n" << output.str();
  std::filesystem::remove_all(dir);
}

TEST(LocalSpawn, ACrashedWorkerFailsTheLaunchAndEndsTheOthers) {
  const std::string dir = out_dir("spawn_crash");
  auto r = run_supervisor(dir, {{"LT_DEVICES", "3"}, {"LT_CRASH_RANK", "1"}});
  // The supervisor exits with 128 + SIGABRT, naming rank 1, long before the
  // 60 s process group timeout.
  EXPECT_EQ(r.exit.exit_code, 128 + SIGABRT) << r.exit.describe() << "\n" << r.output;
  EXPECT_NE(r.output.find("rank 1 of 3"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
  // No worker is left behind.
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir + "/pid" + std::to_string(rank));
    pid_t pid = 0;
    ASSERT_TRUE(static_cast<bool>(in >> pid)) << "rank " << rank << " did not start";
    EXPECT_FALSE(process_alive(pid)) << "rank " << rank << " (pid " << pid << ") still runs";
  }
  std::filesystem::remove_all(dir);
}
