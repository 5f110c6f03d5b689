#pragma once
// FSDPStrategy ("fsdp"): sharded data-parallel training (Lightning's
// strategies/fsdp.py, PyTorch's FullyShardedDataParallel), on the same
// foundation as DDP (strategies/parallel.h): launch, process group, watchdog,
// the no_sync + lockstep Join epoch context. What it adds is how gradients
// and parameters move (its gradient sync, fsdp/flat_shard.h: per unit, the
// units a model declares with lt::FSDPUnit, fsdp/fsdp_unit.h, or a size
// policy) and the state that stays true where a rank holds only a part:
//   FULL_SHARD     parameters, reduced gradients and optimizer state take
//                  1/W per rank; each unit's parameters are all_gathered for
//                  its forward and its backward and freed after.
//   SHARD_GRAD_OP  the gradients are reduce_scattered and each rank's
//                  optimizer steps only its chunk of each unit, then the
//                  chunks are all_gathered: reduced gradients and optimizer
//                  state take 1/W per rank.
//   NO_SHARD       DDP's semantics (c10d's Reducer).
//   HYBRID_SHARD   FULL_SHARD within each node, replicated across nodes:
//                  gathers and reduce_scatters stay within a node, and each
//                  reduced chunk is allreduced with the other nodes' replicas
//                  of it (nodes of equal size, ranks consecutive by node).
// Under uneven inputs a rank that ran out of data shadows the units'
// collectives in the order the others issue them and steps its chunk with the
// reduced gradient (lockstep Join), so the result is the single-optimizer
// window rule, where PyTorch's FSDP has no Join and its
// ZeroRedundancyOptimizer under Join steps stale chunks.
//
//   lt::Trainer trainer(lt::TrainerOptions().devices(2).strategy(std::make_shared<lt::FSDPStrategy>(
//       lt::FSDPStrategyOptions().sharding_strategy(lt::ShardingStrategy::kFullShard))));
//
// Checkpoints are DDP's: the module's whole state_dict, and the optimizer's
// state that of the unsharded optimizer in PyTorch's layout; loading
// reshards it, from a checkpoint of any world size or strategy. In the dict
// a checkpoint's hooks see, the tensors a rank holds only chunks of (freed
// parameters, the optimizer's state) are placeholders (core/deferred_tensor.h's
// deferred_tensor: shape and dtype, no bytes). state_dict_type full (the
// default): save_checkpoint gathers them to global rank 0 a unit at a time
// while it writes the file, so no rank holds the whole model or state;
// sharded: every rank writes its chunks to a file of its own, and rank 0
// meta.pt, which places each placeholder's value in them (a folder,
// plugins/io/sharded_checkpoint.h), no collective but two decisions.
// Between epochs, during evaluation and after fit the module is whole.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/plugins/strategies/fsdp/flat_shard.h>
#include <lightning_cpp/plugins/strategies/parallel.h>

namespace lt {

// PyTorch's torch.distributed.fsdp.ShardingStrategy.
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };

template <>
struct OptionEnumNames<ShardingStrategy> {
  static constexpr std::pair<ShardingStrategy, const char*> kNames[] = {
      {ShardingStrategy::kFullShard, "FULL_SHARD"},
      {ShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"},
      {ShardingStrategy::kNoShard, "NO_SHARD"},
      {ShardingStrategy::kHybridShard, "HYBRID_SHARD"}};
};

// PyTorch's MixedPrecision.reduce_dtype, by torch's dtype names.
template <>
struct OptionEnumNames<ReduceDtype> {
  static constexpr std::pair<ReduceDtype, const char*> kNames[] = {{ReduceDtype::kFloat32, "float32"},
                                                                   {ReduceDtype::kFloat16, "float16"},
                                                                   {ReduceDtype::kBFloat16, "bfloat16"}};
};

// PyTorch's BackwardPrefetch (flat_shard.h): BACKWARD_PRE or NONE (PyTorch's None).
template <>
struct OptionEnumNames<BackwardPrefetch> {
  static constexpr std::pair<BackwardPrefetch, const char*> kNames[] = {
      {BackwardPrefetch::kBackwardPre, "BACKWARD_PRE"}, {BackwardPrefetch::kNone, "NONE"}};
};

// Lightning's FSDPStrategy(state_dict_type).
enum class StateDictType { kFull, kSharded };

template <>
struct OptionEnumNames<StateDictType> {
  static constexpr std::pair<StateDictType, const char*> kNames[] = {{StateDictType::kFull, "full"},
                                                                     {StateDictType::kSharded, "sharded"}};
};

// The options, each with its /// doc above its row: fsdp/fsdp_options.def,
// after the shared ones of parallel_options.def.
struct FSDPStrategyOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_options.def>
#undef LT_OPTION
};

namespace detail {
// A tensor of a checkpoint that ranks hold in chunks, one unit of it: this
// rank's chunk (S_u elements) and the placeholders standing for the unit's
// parameters' values (by their place j in FlatUnits::at(unit).params).
struct DeferredUnit {
  size_t unit;
  torch::Tensor chunk;
  std::vector<std::pair<size_t, torch::Tensor>> placeholders;
};
}  // namespace detail

class FSDPStrategy : public ParallelStrategy {
 public:
  explicit FSDPStrategy(FSDPStrategyOptions options = {});
  std::string name() const override { return "fsdp"; }
  const FSDPStrategyOptions& options() const { return options_; }
  // Between runs; the process group is made once per process.
  FSDPStrategyOptions& options() { return options_; }
  // The sharded gradient sync (FULL_SHARD, SHARD_GRAD_OP) during a run, else null.
  FlatShard* flat_shard() const { return dynamic_cast<FlatShard*>(gradient_sync()); }

  // Sharded: one optimizer (SGD, Adam or AdamW, one parameter group over the
  // module's trainable parameters), re-pointed at this rank's chunks (one per unit).
  OptimizerConfig setup_optimizers(LightningModule& module) override;
  // FULL_SHARD: placeholders for the freed units' parameters (see above).
  c10::Dict<std::string, torch::Tensor> module_state(LightningModule& module) override;
  void load_module_state(LightningModule& module, const c10::Dict<std::string, torch::Tensor>& state) override;
  // FULL_SHARD: every rank evaluates the whole module (ranks evaluate different numbers of batches).
  void on_evaluation_start() override;
  void on_evaluation_end() override;
  // FULL_SHARD: the module is whole after training.
  void on_train_end() override;
  // Sharded: the unsharded optimizer's state dict, its tensors placeholders (see above).
  c10::IValue optimizer_state(torch::optim::Optimizer& optimizer) override;
  void load_optimizer_state(torch::optim::Optimizer& optimizer, const c10::IValue& state,
                            const std::string& where) override;
  // Sharded: by the norm over every rank's chunk (a collective), or by value.
  void clip_gradients(torch::optim::Optimizer& optimizer, double clip_val, GradientClipAlgorithm algorithm) override;
  // Sharded: decided alike (the ranks' gradients differ before the reduction).
  bool all_finite(const std::vector<torch::Tensor>& tensors) override;
  // Over every rank's shard (a collective): the module's parameters hold no gradient here.
  double gradient_norm(torch::optim::Optimizer& optimizer, double norm_type = 2.0) override;
  // full: global rank 0 writes the file while every rank sends it the
  // placeholders' values a unit at a time (collectives), then every rank
  // waits for it. sharded: the folder (see above); a rank that fails to write
  // its file fails the save on every rank, leaving the previous checkpoint.
  void save_checkpoint(const c10::IValue& checkpoint, const std::string& path) override;
  // Sharded: a sharded checkpoint's values stay placeholders, of which each
  // rank reads the parts it holds (the module's and its optimizer state's chunks).
  c10::IValue load_checkpoint(const std::string& path) override;

 protected:
  ParallelSettings parallel_settings() const override;
  OptionValues option_values() const override;
  std::unique_ptr<GradientSync> make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                   std::function<bool()> stop_wish) override;

 private:
  std::string sharding() const;
  // HYBRID_SHARD: the shard (a node's ranks) and replicate (a local rank's across nodes) groups.
  void hybrid_groups(FlatShardOptions& flat);
  void save_sharded(const c10::IValue& checkpoint, const std::string& path,
                    const std::vector<detail::DeferredUnit>& deferred);

  FSDPStrategyOptions options_;
  bool reshard_after_evaluation_ = false;
  // The placeholders of the checkpoint being made (module_state, optimizer_state), for save_checkpoint.
  std::vector<detail::DeferredUnit> deferred_;
  // HYBRID_SHARD's groups, made once per process (for nodes of hybrid_local_size_ ranks).
  int64_t hybrid_local_size_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroup> shard_group_, replicate_group_;
};

}  // namespace lt
