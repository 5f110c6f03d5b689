#pragma once
// What several Join test files share (tests/plugins/join/*_test.cpp, one
// binary join_test): a worker's allreduce of one value, the workers' options,
// the Trainer options and DDP strategy of a worker, the replica-identity probe,
// the "measured:" lines of a run and join_oracle.py's model with a synced
// batch norm. The oracle's model, data and fixtures are in
// tests/distributed/join_oracle.h.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/plugins/layer_sync/sync_batch_norm.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "distributed/join_oracle.h"
#include "support/multiprocess.h"

namespace lt::testing {

inline double allreduce_value(c10d::ProcessGroup& pg, double value, c10d::ReduceOp op = c10d::ReduceOp::SUM) {
  std::vector<torch::Tensor> t{torch::full({1}, value, torch::kDouble)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  pg.allreduce(t, options)->wait();
  return t[0].item<double>();
}

inline WorkerOptions join_options(const std::string& inputs, std::map<std::string, std::string> extra = {}) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = std::move(extra);
  options.env["JOIN_INPUTS"] = inputs;
  return options;
}

// LT_TEST_ACCELERATOR (cpu unless set): where the Cuda tests run the same workers.
inline lt::TrainerOptions base_options(const std::shared_ptr<lt::Strategy>& strategy, int ws) {
  return lt::TrainerOptions()
      .strategy(strategy)
      .accelerator(env_str("LT_TEST_ACCELERATOR", "cpu"))
      .devices(ws)
      .max_epochs(1)
      .enable_progress_bar(false)
      .num_sanity_val_steps(0)
      .log_every_n_steps(1)
      .default_root_dir(std::filesystem::temp_directory_path().string());
}

// One per worker process: its process group lives as long as the strategy.
inline std::shared_ptr<lt::DDPStrategy> make_strategy() {
  // LT_TEST_BACKEND: gloo or nccl (unset: the accelerator's default)
  static auto strategy = std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions()
                                                               .process_group_timeout(std::chrono::seconds(30))
                                                               .process_group_backend(env_str("LT_TEST_BACKEND")));
  return strategy;
}

// After every optimizer step (before zero_grad), a checksum of the
// parameters, the optimizer's state, the learning rate and global_step.
class ReplicaChecksum : public lt::Callback {
 public:
  std::string name() const override { return "ReplicaChecksum"; }
  void on_before_zero_grad(lt::Trainer& trainer, lt::LightningModule& module,
                           torch::optim::Optimizer& optimizer) override {
    double sum = 0.0;
    for (const auto& p : module.parameters()) sum += p.sum().item<double>();
    for (auto& group : optimizer.param_groups()) {
      sum += 1000.0 * lt::get_lr(group);
      for (auto& p : group.params()) {
        auto it = optimizer.state().find(lt::optimizer_state_key(p));
        if (it == optimizer.state().end()) continue;
        if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
          if (sgd->momentum_buffer().defined()) sum += 7.0 * sgd->momentum_buffer().sum().item<double>();
        } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
          sum += 3.0 * adam->exp_avg().sum().item<double>() + 5.0 * adam->exp_avg_sq().sum().item<double>() +
                 static_cast<double>(adam->step());
        }
      }
    }
    steps.push_back({static_cast<double>(trainer.global_step()), sum});
  }
  std::vector<std::pair<double, double>> steps;
};

// Every rank's sequence of (global_step, checksum), gathered: equal on every rank?
inline bool replicas_identical(lt::Strategy& strategy, const ReplicaChecksum& probe, int64_t* steps_out) {
  const int64_t n = static_cast<int64_t>(probe.steps.size());
  const torch::Tensor counts = strategy.all_gather(torch::tensor({n}, torch::kLong)).flatten();
  *steps_out = n;
  if (!(counts == n).all().item<bool>()) return false;
  torch::Tensor mine = torch::zeros({n, 2}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    mine[i][0] = probe.steps[i].first;
    mine[i][1] = probe.steps[i].second;
  }
  const torch::Tensor all = strategy.all_gather(mine);
  return (all == all[0]).all().item<bool>();
}

// Prints the workers' "measured: ..." lines (rank 0's), so the figures a test states show in its log.
inline void print_measured(const lt::testing::WorkersResult& r) {
  if (r.outputs.empty()) return;
  std::istringstream lines(r.outputs[0]);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("measured: ") != std::string::npos) std::printf("%s\n", line.c_str());
  }
}

// join_oracle.py's model with a synced batch norm: Linear -> SyncBatchNorm -> tanh -> Linear.
class SyncNet : public lt::LightningModule {
 public:
  SyncNet() {
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    bn = register_module("bn", lt::SyncBatchNorm(kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, 1));
    init_like_oracle(*this);
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::mse_loss(l2(torch::tanh(bn(l1(batch.data)))), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLr));
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1));
    out.push_back(bn->running_mean);
    out.push_back(bn->running_var);
    return torch::cat(out);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  lt::SyncBatchNorm bn{nullptr};
};

}  // namespace lt::testing
