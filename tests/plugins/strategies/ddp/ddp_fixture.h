#pragma once
// What the ddp_test binary's files share: TinyNet (a small regression net
// with an optional branch and a buffer), its data, the workers' DDP options
// and output folders, and an exact comparison of saved tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt::testing::ddp {

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

inline Data make_data(int64_t n) {
  auto gen = at::detail::createCPUGenerator(123);
  return {torch::randn({n, kIn}, gen), torch::randn({n, kOut}, gen)};
}

// SGD's rate for a width: 0.1 at kHidden, smaller as fc2 sums more units, so
// that a wide net trains without diverging (a diverging run amplifies the
// last-bit differences of two summation orders past any tolerance).
inline double lr_for(int64_t hidden) { return 0.1 * static_cast<double>(kHidden) / static_cast<double>(hidden); }

inline std::shared_ptr<TinyNet> make_net(int64_t branch_mask, int64_t hidden = kHidden) {
  torch::manual_seed(0);
  return std::make_shared<TinyNet>(branch_mask, hidden, lr_for(hidden));
}

inline std::vector<torch::Tensor> parameter_list(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline lt::DDPStrategyOptions test_strategy_options() {
  return lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(20));
}

inline std::string out_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("lt_ddp_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::vector<torch::Tensor> load_tensors(const std::string& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path);
  return t;
}

inline void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << ": tensor " << i;
}

}  // namespace lt::testing::ddp
