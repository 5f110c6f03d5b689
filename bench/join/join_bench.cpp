// bench/join: what uneven-inputs Join costs, with lt::Trainer and the ddp
// strategy (gloo), a 784-256-256-10 MLP, batch 64, SGD, synthetic data in
// memory, one intra-op thread per process, N worker processes (default 2):
//   even:   every rank has B batches; Join (uneven_inputs: join) vs no Join
//           (uneven_inputs: pad, the same batches): ratio, target <= 1.02;
//           the same with join_throw_on_early_termination.
//   uneven: rank r has B * (r + 1) / N batches (the last rank B) under Join,
//           vs the longest rank's time when every rank has B batches without
//           Join (what the longest rank costs when nobody leaves early):
//           ratio, target <= 1.05.
//   lockstep: the uneven run in join_mode lockstep (joined ranks take every
//           optimizer step with the others; the default) vs join_mode pytorch
//           (joined ranks only shadow): what lockstep costs.
// Each configuration runs `--reps` times interleaved with the others; the
// minimum wall time of fit (max over ranks) is kept, which filters out the
// noise of a shared machine.
//
//   join_bench [--world N] [--batches B] [--reps R]
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "../machine_limit.h"
#include "../ranks.h"

namespace {

constexpr int64_t kBatch = 64;
constexpr int64_t kHidden = 256;

struct Args {
  int world = 2;
  int64_t batches = 120;
  int reps = 5;
};

class Mlp : public lt::LightningModule {
 public:
  Mlp() {
    torch::manual_seed(0);
    net = register_module("net", torch::nn::Sequential(torch::nn::Linear(28 * 28, kHidden), torch::nn::ReLU(),
                                                       torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                                                       torch::nn::Linear(kHidden, 10)));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t) override {
    return torch::cross_entropy_loss(net->forward(batch.data), batch.target);
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01));
  }
  torch::nn::Sequential net{nullptr};
};

// The rank's own batches (a custom sampler: the ddp strategy uses it as is).
class AllIndices : public lt::Sampler {
 public:
  explicit AllIndices(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> out(n_);
    for (int64_t i = 0; i < n_; ++i) out[i] = i;
    return out;
  }

 private:
  int64_t n_;
};

std::shared_ptr<lt::DataLoader> loader(int64_t rank, int64_t batches) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(rank));
  auto data = torch::randn({batches * kBatch, 28 * 28}, gen);
  auto target = torch::randint(10, {batches * kBatch}, gen);
  auto l = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data, target),
                                            lt::DataLoaderOptions(kBatch));
  l->set_sampler(std::make_shared<AllIndices>(batches * kBatch));
  return l;
}

struct Config {
  std::string name;
  lt::UnevenInputs mode;
  bool throw_mode;
  bool uneven;
  lt::JoinMode join_mode = lt::JoinMode::kLockstep;
};

int worker(const Args& args) {
  torch::set_num_threads(1);
  const int64_t rank = std::atoi(std::getenv("RANK"));
  // This core's limit, before the runs: every rank measures at once, one per core, as they will train.
  const double limit = lt::bench::sgemm_gflops();
  auto strategy = std::make_shared<lt::DDPStrategy>();
  const std::vector<Config> configs = {
      {"even, no Join (pad)", lt::UnevenInputs::kPad, false, false},
      {"even, Join", lt::UnevenInputs::kJoin, false, false},
      {"even, Join, throw_on_early_termination", lt::UnevenInputs::kJoin, true, false},
      {"uneven, Join", lt::UnevenInputs::kJoin, false, true},
      {"uneven, Join, join_mode pytorch", lt::UnevenInputs::kJoin, false, true, lt::JoinMode::kPyTorch},
  };
  std::map<std::string, double> best;
  for (int rep = 0; rep < args.reps; ++rep) {
    for (const Config& c : configs) {
      const int64_t batches = c.uneven ? args.batches * (rank + 1) / args.world : args.batches;
      auto model = std::make_shared<Mlp>();
      auto data = loader(rank, batches);
      strategy->options().uneven_inputs(c.mode).join_throw_on_early_termination(c.throw_mode).join_mode(c.join_mode);
      lt::Trainer trainer(lt::TrainerOptions()
                              .strategy(strategy)
                              .devices(args.world)
                              .max_epochs(1)
                              .enable_progress_bar(false)
                              .enable_model_summary(false)
                              .default_logger(false)
                              .num_sanity_val_steps(0)
                              .log_every_n_steps(1000000));
      strategy->barrier();
      const auto start = std::chrono::steady_clock::now();
      trainer.fit(model, data);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double slowest = strategy->reduce(torch::tensor({seconds}, torch::kDouble), lt::ReduceOp::kMax).item<double>();
      auto it = best.find(c.name);
      if (it == best.end() || slowest < it->second) best[c.name] = slowest;
    }
  }
  if (rank == 0) {
    auto ms = [&](const std::string& k) { return best[k] * 1000.0; };
    for (const Config& c : configs) std::printf("%-45s %8.1f ms\n", c.name.c_str(), ms(c.name));
    const double base = best["even, no Join (pad)"];
    std::printf("\neven inputs, Join / no Join:                %.3fx (target <= 1.02)\n", best["even, Join"] / base);
    std::printf("even inputs, Join throw mode / no Join:     %.3fx (target <= 1.05)\n",
                best["even, Join, throw_on_early_termination"] / base);
    std::printf("uneven inputs under Join / longest rank:    %.3fx (target <= 1.05)\n", best["uneven, Join"] / base);
    std::printf("uneven inputs, lockstep / pytorch mode:     %.3fx (what joined ranks' steps cost)\n",
                best["uneven, Join"] / best["uneven, Join, join_mode pytorch"]);
    std::printf("(%d ranks, %lld batches of %lld on the longest rank, best of %d)\n", args.world,
                static_cast<long long>(args.batches), static_cast<long long>(kBatch), args.reps);
    // Each rank's step rate against this machine's limit (one rank per core, one thread each).
    const double step_gflops = lt::bench::mlp_step_flops(kBatch, {28 * 28, kHidden, kHidden, 10}) *
                               static_cast<double>(args.batches) / base / 1e9;
    std::printf("each rank, even without Join: %.1f GFLOP/s, %.0f%% of this machine's sgemm rate (%.1f GFLOP/s, "
                "1 thread)\n", step_gflops, 100.0 * step_gflops / limit, limit);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--world")) args.world = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batches")) args.batches = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) args.reps = std::atoi(argv[i + 1]);
  }
  if (std::getenv("LT_JOIN_BENCH_WORKER") != nullptr) return worker(args);
  return lt::bench::run_ranks(args.world, {{"LT_JOIN_BENCH_WORKER", "1"}}, "join_bench", std::chrono::minutes(20)) ? 0
                                                                                                              : 1;
}

