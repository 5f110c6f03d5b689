// Several optimizers under manual optimization (loops/optimization/manual.h)
// with DDP: refused under uneven Join by the Join-compatibility check and at
// an undeclared second gradient sync; on even inputs (pad, or Join that
// nobody needs) identical replicas equal to a hand-written loop; the
// Reducer's error without find_unused_parameters. Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

namespace {

// tests/loops/optimization/manual_test.cpp's TwoOptimizers (Lightning's GAN pattern: two
// optimizers, each step with the other's parameters toggled off) on
// join_oracle.py's model: two manual_backward, so two gradient syncs, per batch.
class TwoOptimizerNet : public lt::LightningModule {
 public:
  TwoOptimizerNet() {
    set_automatic_optimization(false);
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    init_like_oracle(*this);
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    ++training_steps;
    toggle_optimizer(0);
    torch::Tensor loss_a = torch::mse_loss(l2(torch::tanh(l1(batch.data))), batch.target);
    optimizer(0).zero_grad();
    manual_backward(loss_a);
    optimizer_step(0);
    untoggle_optimizer(0);
    toggle_optimizer(1);
    torch::Tensor loss_b = torch::mse_loss(l2(torch::tanh(l1(batch.data)).detach()), -batch.target);
    optimizer(1).zero_grad();
    manual_backward(loss_b);
    optimizer_step(1);
    untoggle_optimizer(1);
    return loss_b;
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    opt_a = std::make_shared<torch::optim::SGD>(l1->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    opt_b = std::make_shared<torch::optim::SGD>(l2->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
    return {opt_a, opt_b};
  }
  // The parameters, then both optimizers' momentum buffers.
  torch::Tensor state() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    for (const auto& optimizer : {opt_a, opt_b}) {
      for (auto& group : optimizer->param_groups()) {
        for (auto& p : group.params()) {
          auto it = optimizer->state().find(lt::optimizer_state_key(p));
          if (it == optimizer->state().end()) continue;
          out.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().reshape(-1));
        }
      }
    }
    return torch::cat(out);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_a, opt_b;
  int64_t training_steps = 0;
};

// TwoOptimizerNet as DDP trains it on `ws` ranks with `n` batches each: each
// optimizer steps on the mean over the ranks of their batch's gradient.
torch::Tensor two_optimizers_reference(int64_t ws, int64_t n, int64_t epochs) {
  TwoOptimizerNet m;
  m.configure_optimizers();
  auto average = [ws](const torch::nn::Module& layer) {
    torch::NoGradGuard no_grad;
    for (const auto& p : layer.parameters()) p.grad().div_(static_cast<double>(ws));
  };
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < n; ++i) {
      m.opt_a->zero_grad();
      for (int64_t r = 0; r < ws; ++r) {
        auto [x, y] = oracle_batch(r, i);
        torch::mse_loss(m.l2(torch::tanh(m.l1(x))), y).backward();
      }
      average(*m.l1);
      m.opt_a->step();
      m.opt_b->zero_grad();
      for (int64_t r = 0; r < ws; ++r) {
        auto [x, y] = oracle_batch(r, i);
        torch::mse_loss(m.l2(torch::tanh(m.l1(x)).detach()), -y).backward();
      }
      average(*m.l2);
      m.opt_b->step();
    }
  }
  return m.state();
}

}  // namespace

// Several optimizers under manual optimization with DDP:
//  - uneven inputs under Join (3 and 5 batches): refused on every rank before
//    the first training_step by the Join-compatibility check, naming manual
//    optimization and the ways out (declare the module's collectives, or
//    uneven_inputs: pad);
//  - declared (collectives().manual_declared = true) although training_step
//    calls manual_backward twice: refused on every rank at the second
//    manual_backward of the first batch, before its gradient allreduce (a
//    joined rank shadows one gradient sync per batch, so the ranks'
//    collectives would stop matching: a gloo abort or a hang);
//  - even inputs (4 batches each, 2 epochs) with uneven_inputs: pad (no Join)
//    and under Join (nobody joins): replicas identical (parameters and both
//    optimizers' momentum, bitwise), global_step 16 (two steps per batch), and
//    equal to the hand-written loop within 1e-9;
//  - without find_unused_parameters the toggled-off parameters get no
//    gradient, and the second batch stops with the Reducer's error naming
//    find_unused_parameters (as PyTorch's DDP).
LT_TEST_WORKER(SeveralOptimizersManualOptimization) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  strategy->options().find_unused_parameters(true);
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    } catch (const lt::JoinCompatibilityError& e) {
      error = e.what();
    }
    for (const char* expected :
         {"1 feature is incompatible with Join", "1. manual optimization: manual optimization decides itself",
          "Fix: declare the module's collectives with collectives().manual_declared = true",
          "or train with uneven_inputs: pad"}) {
      LT_WORKER_CHECK(error.find(expected) != std::string::npos, "refusal without '", expected, "': ", error);
    }
    LT_WORKER_CHECK(model->training_steps == 0 && trainer.global_step() == 0, "refused after ",
                    model->training_steps, " training steps");
  }
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    model->collectives().manual_declared = true;
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    } catch (const lt::Error& e) {
      error = e.what();
    }
    LT_WORKER_CHECK(error.find(c10::str("manual_backward called a second time in one batch (rank ", rank,
                                        ", epoch 0, batch 0)")) != std::string::npos &&
                        error.find("uneven_inputs: pad") != std::string::npos,
                    error);
    LT_WORKER_CHECK(model->training_steps == 1 && trainer.global_step() == 1, model->training_steps,
                    " training steps, global_step ", trainer.global_step());
  }
  for (const lt::UnevenInputs uneven : {lt::UnevenInputs::kPad, lt::UnevenInputs::kJoin}) {
    strategy->options().uneven_inputs(uneven);
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2).max_epochs(2));
    trainer.fit(model, rank_loader(rank, 4));
    const char* name = uneven == lt::UnevenInputs::kPad ? "pad" : "join";
    LT_WORKER_CHECK(model->training_steps == 8 && trainer.global_step() == 16, name, ": ", model->training_steps,
                    " training steps, global_step ", trainer.global_step());
    const torch::Tensor state = model->state();
    const torch::Tensor all = strategy->all_gather(state);
    LT_WORKER_CHECK(all[0].equal(all[1]), name, ": the replicas differ by ",
                    (all[0] - all[1]).abs().max().item<double>());
    const double error = (state - two_optimizers_reference(2, 4, 2)).abs().max().item<double>();
    LT_WORKER_CHECK(error <= 1e-9, name, ": differs from the hand-written loop by ", error);
    std::cerr << "measured: two optimizers (" << name << "): difference from the hand-written loop " << error
              << std::endl;
  }
  strategy->options().uneven_inputs(lt::UnevenInputs::kJoin);
  strategy->options().find_unused_parameters(false);
  {
    auto model = std::make_shared<TwoOptimizerNet>();
    lt::Trainer trainer(base_options(strategy, 2));
    std::string error = "<trained>";
    try {
      trainer.fit(model, rank_loader(rank, 4));
    } catch (const std::exception& e) {
      error = e.what();
    }
    LT_WORKER_CHECK(error.find("find_unused_parameters") != std::string::npos && model->training_steps == 1,
                    model->training_steps, " training steps: ", error);
  }
  return 0;
}

TEST(JoinLockstep, SeveralOptimizersUnderManualOptimizationRefusedUnderJoinAndIdenticalOnEvenInputs) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_workers("SeveralOptimizersManualOptimization", 2, options);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "a refusal waited for a timeout";
  print_measured(r);
}
