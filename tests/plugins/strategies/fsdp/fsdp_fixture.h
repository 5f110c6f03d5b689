#pragma once
// What the fsdp_test binary's files share: one fsdp and one ddp strategy per
// worker process, the Trainer's options for a run of `ws` ranks, the
// optimizer state a checkpoint holds, and how a row is sharded. The model,
// data and fixtures are the Join oracle's (distributed/join_oracle.h).
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/lightning.h>

#include "distributed/join_oracle.h"

namespace lt::testing {

// One per worker process each: a process group lives as long as its strategy.
// LT_TEST_BACKEND: gloo or nccl (unset: the accelerator's default).
inline std::shared_ptr<lt::FSDPStrategy> fsdp() {
  static auto strategy = std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions()
                                                                .process_group_timeout(std::chrono::seconds(30))
                                                                .process_group_backend(env_str("LT_TEST_BACKEND")));
  return strategy;
}

inline std::shared_ptr<lt::DDPStrategy> ddp() {
  static auto strategy = std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions()
                                                               .process_group_timeout(std::chrono::seconds(30))
                                                               .process_group_backend(env_str("LT_TEST_BACKEND")));
  return strategy;
}

// LT_TEST_ACCELERATOR (cpu unless set): where the Cuda tests run the same workers.
inline lt::TrainerOptions options(const std::shared_ptr<lt::Strategy>& strategy, int ws) {
  return lt::TrainerOptions()
      .strategy(strategy)
      .accelerator(env_str("LT_TEST_ACCELERATOR", "cpu"))
      .devices(ws)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .default_logger(false)
      .default_root_dir(std::filesystem::temp_directory_path().string());
}

// The optimizer state a checkpoint holds, loaded into a fresh JoinNet's
// optimizer: every state tensor, flattened and concatenated in parameter order.
inline torch::Tensor optimizer_state_of(const std::string& path, const std::string& optim) {
  auto model = std::make_shared<JoinNet>();
  model->optim = optim;
  auto optimizer = model->configure_optimizers().optimizer;
  lt::load_optimizer_state_dict(*optimizer, lt::pickle_load_file(path).toGenericDict().at("optimizer_states").toListRef()[0],
                               path);
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) {
    auto it = optimizer->state().find(lt::optimizer_state_key(p));
    if (it == optimizer->state().end()) continue;
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.push_back(adam->exp_avg().reshape(-1));
      out.push_back(adam->exp_avg_sq().reshape(-1));
      out.push_back(torch::tensor({static_cast<double>(adam->step())}, torch::kDouble));
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out.push_back(sgd->momentum_buffer().reshape(-1));
    }
  }
  return out.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(out);
}

inline const char* name_of(lt::ShardingStrategy sharding) {
  return sharding == lt::ShardingStrategy::kFullShard ? "FULL_SHARD" : "SHARD_GRAD_OP";
}

}  // namespace lt::testing

// How a row is sharded: the strategy, and for FULL_SHARD where the units come from.
struct Sharding {
  lt::ShardingStrategy strategy;
  bool declared_units = false;  // JoinNet's Linears as lt::FSDPUnit
  int64_t min_num_params = 0;   // the size policy (5: each Linear a unit)
  std::string name() const {
    return lt::OptionCodec<lt::ShardingStrategy>::show(strategy) + (declared_units ? " (declared units)" : "") +
           (min_num_params > 0 ? " (policy units)" : "");
  }
};
