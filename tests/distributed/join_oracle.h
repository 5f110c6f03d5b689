#pragma once
// The Join oracle's model, data and fixtures (tests/python/join_oracle.py writes
// tests/fixtures/join_*.txt), shared by the Trainer's and Fabric's Join tests.

#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/lightning.h>

#include "support/multiprocess.h"
#include "support/row_stream.h"

namespace lt::testing {


inline constexpr double kLr = 0.1;
inline constexpr int64_t kBatch = 2;
inline constexpr int64_t kIn = 3;
inline constexpr int64_t kHidden = 4;

// The oracle's initial weights (tests/python/join_oracle.py's init_params), in float64.
inline void init_like_oracle(torch::nn::Module& module) {
  module.to(torch::kDouble);
  torch::NoGradGuard no_grad;
  int64_t j = 0;
  for (auto& p : module.parameters()) {
    auto i = torch::arange(p.numel(), torch::kDouble);
    p.copy_((0.3 * torch::sin(1.0 + 0.7 * i + 1.3 * static_cast<double>(j++))).reshape(p.sizes()));
  }
}

class JoinNet : public lt::LightningModule {
 public:
  // units: each Linear declared an lt::FSDPUnit (the same parameters, names and initial values).
  explicit JoinNet(bool units = false) {
    if (units) {
      u1 = register_module("l1", lt::FSDPUnit<torch::nn::Linear>(kIn, kHidden));
      u2 = register_module("l2", lt::FSDPUnit<torch::nn::Linear>(kHidden, 1));
    } else {
      l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
      l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    }
    init_like_oracle(*this);
  }
  torch::Tensor forward(const torch::Tensor& x) { return u1 ? u2(torch::tanh(u1(x))) : l2(torch::tanh(l1(x))); }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    ++training_steps;
    torch::Tensor loss = torch::mse_loss(forward(batch.data), batch.target);
    if (log_value) {
      lt::LogOptions mean;
      mean.sync_dist(true);
      log("value", static_cast<double>(global_rank() + 1), mean);
      lt::LogOptions max = mean;
      max.reduce_fx(lt::ReduceOp::kMax);
      log("value_max", static_cast<double>(global_rank() + 1), max);
    } else {
      lt::LogOptions options;
      options.sync_dist(true);
      log("train_loss", loss, options);
    }
    return loss;
  }
  void on_train_batch_end(const torch::Tensor&, const lt::Batch&, int64_t batch_idx) override {
    if (!log_value) return;
    const auto& metrics = lt::detail::ModuleAccess::runtime(*this).state->callback_metrics;
    logged.push_back({metrics.at("value"), metrics.at("value_max")});
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    // As tests/python/join_oracle.py's make_optimizer.
    std::shared_ptr<torch::optim::Optimizer> optimizer;
    if (optim == "adam") {
      optimizer = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    } else {
      optimizer = std::make_shared<torch::optim::SGD>(
          parameters(), torch::optim::SGDOptions(kLr).momentum(optim == "momentum" ? 0.9 : 0.0));
    }
    lt::OptimizerConfig config;
    config.optimizer = optimizer;
    if (step_lr_every > 0) {
      config.lr_scheduler = std::make_shared<lt::StepLR>(*optimizer, step_lr_every, 0.5);
      config.interval = lt::Interval::kStep;
    }
    return config;
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    return torch::cat(out).cpu();  // on the CPU, where the fixtures are, also after a run on a GPU
  }

  torch::nn::Linear l1{nullptr};
  torch::nn::Linear l2{nullptr};
  lt::FSDPUnit<torch::nn::Linear> u1{nullptr};
  lt::FSDPUnit<torch::nn::Linear> u2{nullptr};
  int64_t training_steps = 0;
  bool log_value = false;
  std::vector<std::pair<double, double>> logged;
  std::string optim = "sgd";  // sgd, momentum or adam
  int64_t step_lr_every = 0;  // > 0: a per-step StepLR (gamma 0.5)
};

// This rank's own samples, in order: the DDP strategy keeps a custom sampler as is.
class OwnShardSampler : public lt::Sampler {
 public:
  explicit OwnShardSampler(int64_t size) : size_(size) {}
  std::vector<int64_t> indices(int64_t /*epoch*/) const override {
    std::vector<int64_t> out(size_);
    for (int64_t i = 0; i < size_; ++i) out[i] = i;
    return out;
  }

 private:
  int64_t size_;
};

// Batch `b` of rank `rank` (join_oracle.py's batch(rank, b)): inputs and targets, float64.
inline std::pair<torch::Tensor, torch::Tensor> oracle_batch(int64_t rank, int64_t b) {
  auto s = torch::arange(kBatch, torch::kDouble);
  auto d = torch::arange(kIn, torch::kDouble);
  const double r = static_cast<double>(rank);
  const double bb = static_cast<double>(b);
  return {torch::sin(0.5 + 0.31 * r + 0.17 * bb + 0.05 * s.unsqueeze(1) + 0.9 * d.unsqueeze(0)),
          torch::cos(0.2 * r + 0.13 * bb + 0.4 * s).unsqueeze(1)};
}

// Rank `rank`'s `num_batches` batches of its own rows (in `dtype`); with LT_STREAM=1 read
// as a stream of unknown length (the matrix then checks streams against the
// oracle), by LT_STREAM_WORKERS loader worker threads, each reading every
// W-th batch of the rows (so the loader gives them in the same order).
inline std::shared_ptr<lt::DataLoader> rank_loader(int64_t rank, int64_t num_batches,
                                            torch::Dtype dtype = torch::kDouble) {
  std::vector<torch::Tensor> xs;
  std::vector<torch::Tensor> ys;
  for (int64_t b = 0; b < num_batches; ++b) {
    auto [x, y] = oracle_batch(rank, b);
    xs.push_back(x);
    ys.push_back(y);
  }
  auto data = (num_batches > 0 ? torch::cat(xs) : torch::zeros({0, kIn}, torch::kDouble)).to(dtype);
  auto targets = (num_batches > 0 ? torch::cat(ys) : torch::zeros({0, 1}, torch::kDouble)).to(dtype);
  if (env_int("LT_STREAM") != 0) {
    return std::make_shared<lt::DataLoader>(
        std::make_shared<lt::testing::RowStream>(data, targets, /*known=*/false, /*block=*/kBatch),
        lt::DataLoaderOptions(kBatch).num_workers(env_int("LT_STREAM_WORKERS")));
  }
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(data, targets),
                                                 lt::DataLoaderOptions(kBatch));
  loader->set_sampler(std::make_shared<OwnShardSampler>(num_batches * kBatch));
  return loader;
}


// The lines of a fixture written by tests/python/join_oracle.py: `head` reads
// a line's leading columns; the numbers after them are the reference parameters.
template <typename Config>
std::vector<Config> read_fixture(const std::string& name, const std::function<void(std::istream&, Config&)>& head) {
  std::ifstream in(std::string(LT_SOURCE_DIR) + "/tests/fixtures/" + name);
  std::vector<Config> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Config c;
    head(ss, c);
    double v = 0;
    while (ss >> v) c.params.push_back(v);
    out.push_back(std::move(c));
  }
  return out;
}

// "5,8" -> {5, 8}
inline std::vector<int64_t> parse_counts(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream cs(text);
  std::string item;
  while (std::getline(cs, item, ',')) out.push_back(std::stoll(item));
  return out;
}

struct LockstepConfig {
  int ws = 0;
  std::vector<int64_t> counts;
  int64_t k = 1;
  bool divide = true;
  int64_t epochs = 1;
  std::string optim, mode;
  std::vector<double> params;
  std::string describe() const {
    std::string c;
    for (size_t i = 0; i < counts.size(); ++i) c += c10::str(i ? "," : "", counts[i]);
    return c10::str("ws=", ws, " counts=", c, " k=", k, " divide=", divide, " epochs=", epochs, " ", optim, " ", mode);
  }
};

inline std::vector<LockstepConfig> read_lockstep() {
  return read_fixture<LockstepConfig>("join_lockstep.txt", [](std::istream& ss, LockstepConfig& c) {
    std::string counts;
    int divide = 0;
    ss >> c.ws >> counts >> c.k >> divide >> c.epochs >> c.optim >> c.mode;
    c.counts = parse_counts(counts);
    c.divide = divide != 0;
  });
}

}  // namespace lt::testing
