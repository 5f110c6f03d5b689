#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <map>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>

namespace lt {

namespace {

using detail::DeferredUnit;

// The tensors of one parameter's state in SGD, Adam and AdamW, in a fixed
// order; an undefined one (SGD without momentum, Adam without amsgrad) is
// undefined on every rank alike.
std::vector<torch::Tensor> state_tensors(const torch::optim::SGDParamState& s) { return {s.momentum_buffer()}; }
void set_state_tensors(torch::optim::SGDParamState& s, const std::vector<torch::Tensor>& t) { s.momentum_buffer(t[0]); }
template <typename State>
std::vector<torch::Tensor> state_tensors(const State& s) {
  return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
}
template <typename State>
void set_state_tensors(State& s, const std::vector<torch::Tensor>& t) {
  s.exp_avg(t[0]);
  s.exp_avg_sq(t[1]);
  s.max_exp_avg_sq(t[2]);
}
int64_t state_step(const torch::optim::SGDParamState& /*s*/) { return 0; }
void set_state_step(torch::optim::SGDParamState& /*s*/, int64_t /*step*/) {}
template <typename State>
int64_t state_step(const State& s) {
  return s.step();
}
template <typename State>
void set_state_step(State& s, int64_t step) {
  s.step(step);
}

// The optimizer, over the module's whole parameters, that a sharded one stands for.
template <typename Opt, typename Options>
Opt unsharded(const torch::optim::Optimizer& sharded, const FlatShard& flat) {
  return Opt(flat.parameters(), static_cast<const Options&>(sharded.param_groups()[0].options()));
}

// The state dict of the unsharded optimizer (ddp's) that the sharded one
// stands for: each parameter's state tensors are placeholders (alike on every
// rank: the shards' states are made by the same steps), each unit's chunks
// of a state tensor one DeferredUnit, gathered while the checkpoint is written.
template <typename Opt, typename Options, typename State>
c10::IValue consolidate(torch::optim::Optimizer& sharded, const FlatShard& flat, std::vector<DeferredUnit>& deferred) {
  Opt full = unsharded<Opt, Options>(sharded, flat);
  std::vector<const State*> chunks;  // by unit
  for (const auto& shard : flat.shards()) {
    auto it = sharded.state().find(optimizer_state_key(shard));
    if (it != sharded.state().end()) chunks.push_back(static_cast<const State*>(it->second.get()));
  }
  if (chunks.size() == flat.shards().size()) {
    const size_t slots = state_tensors(*chunks[0]).size();
    std::vector<std::vector<torch::Tensor>> tensors(flat.parameters().size(), std::vector<torch::Tensor>(slots));
    for (size_t j = 0; j < slots; ++j) {
      if (!state_tensors(*chunks[0])[j].defined()) continue;  // undefined for every parameter
      for (size_t u = 0; u < chunks.size(); ++u) {
        DeferredUnit unit{u, state_tensors(*chunks[u])[j], {}};
        const std::vector<size_t>& params = flat.units()[u].params;
        for (size_t k = 0; k < params.size(); ++k) {
          torch::Tensor placeholder = deferred_tensor(flat.parameters()[params[k]].sizes(), unit.chunk.options());
          tensors[params[k]][j] = placeholder;
          unit.placeholders.emplace_back(k, std::move(placeholder));
        }
        deferred.push_back(std::move(unit));
      }
    }
    for (size_t i = 0; i < flat.parameters().size(); ++i) {
      auto state = std::make_unique<State>();
      set_state_step(*state, state_step(*chunks[0]));
      set_state_tensors(*state, tensors[i]);
      full.state()[optimizer_state_key(flat.parameters()[i])] = std::move(state);
    }
  }
  return optimizer_state_dict(full);
}

// The reverse: the unsharded optimizer's state, this rank's chunk of it.
template <typename Opt, typename Options, typename State>
void reshard(torch::optim::Optimizer& sharded, const FlatShard& flat, const c10::IValue& state,
             const std::string& where) {
  Opt full = unsharded<Opt, Options>(sharded, flat);
  load_optimizer_state_dict(full, state, where, /*copy=*/false);  // this rank's chunks are copied below
  sharded.param_groups()[0].set_options(full.param_groups()[0].options().clone());
  for (const auto& shard : flat.shards()) sharded.state().erase(optimizer_state_key(shard));
  auto first = full.state().find(optimizer_state_key(flat.parameters()[0]));
  if (first == full.state().end()) return;  // saved before the first step
  const size_t slots = state_tensors(static_cast<const State&>(*first->second)).size();
  std::vector<torch::Tensor> chunks;  // [slot]: this rank's S elements
  for (size_t j = 0; j < slots; ++j) {
    std::vector<torch::Tensor> whole;
    for (size_t i = 0; i < flat.parameters().size(); ++i) {
      auto it = full.state().find(optimizer_state_key(flat.parameters()[i]));
      LT_CHECK_VALUE(it != full.state().end(), "strategy fsdp: the optimizer state to load has no state for parameter ",
                     i, " of ", flat.parameters().size(), " (a checkpoint of another model or optimizer?)");
      whole.push_back(state_tensors(static_cast<const State&>(*it->second))[j]);
    }
    chunks.push_back(whole[0].defined() ? flat.units().flatten(whole) : torch::Tensor());
  }
  int64_t offset = 0;
  for (const auto& shard : flat.shards()) {
    std::vector<torch::Tensor> tensors;
    for (const auto& chunk : chunks) {
      tensors.push_back(chunk.defined() ? chunk.narrow(0, offset, shard.numel()).clone() : chunk);
    }
    offset += shard.numel();
    auto state = std::make_unique<State>();
    set_state_step(*state, state_step(static_cast<const State&>(*first->second)));
    set_state_tensors(*state, tensors);
    sharded.state()[optimizer_state_key(shard)] = std::move(state);
  }
}

struct Consolidate {
  template <typename Opt, typename Options, typename State>
  static c10::IValue run(torch::optim::Optimizer& optimizer, const FlatShard& flat,
                         std::vector<DeferredUnit>* deferred) {
    return consolidate<Opt, Options, State>(optimizer, flat, *deferred);
  }
};
struct Reshard {
  template <typename Opt, typename Options, typename State>
  static c10::IValue run(torch::optim::Optimizer& optimizer, const FlatShard& flat, const c10::IValue& state,
                         const std::string& where) {
    reshard<Opt, Options, State>(optimizer, flat, state, where);
    return {};
  }
};

// Step::run with the optimizer's type: SGD, Adam or AdamW (setup_optimizers lets no other through).
template <typename Step, typename... Args>
c10::IValue with_optimizer_type(torch::optim::Optimizer& optimizer, const FlatShard& flat, const Args&... args) {
  namespace o = torch::optim;
  if (dynamic_cast<o::SGD*>(&optimizer) != nullptr) {
    return Step::template run<o::SGD, o::SGDOptions, o::SGDParamState>(optimizer, flat, args...);
  }
  if (dynamic_cast<o::AdamW*>(&optimizer) != nullptr) {
    return Step::template run<o::AdamW, o::AdamWOptions, o::AdamWParamState>(optimizer, flat, args...);
  }
  LT_INTERNAL_ASSERT(dynamic_cast<o::Adam*>(&optimizer) != nullptr,
                     "strategy fsdp: setup_optimizers let through an optimizer it cannot shard");
  return Step::template run<o::Adam, o::AdamOptions, o::AdamParamState>(optimizer, flat, args...);
}

}  // namespace

FSDPStrategy::FSDPStrategy(FSDPStrategyOptions options) : options_(std::move(options)) {
  {
    const FSDPStrategyOptions& options = options_;
    const char* owner = "strategy fsdp: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_options.def>
#undef LT_OPTION
  }
}

OptionValues FSDPStrategy::option_values() const {
  OptionValues values;
  const FSDPStrategyOptions& options = options_;
#define LT_OPTION LT_OPTION_SHOW
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_options.def>
#undef LT_OPTION
  return values;
}

ParallelSettings FSDPStrategy::parallel_settings() const {
  // A rank that ran out of data steps its chunk with the others: lockstep only.
  return parallel_settings_of(options_, JoinMode::kLockstep);
}

std::unique_ptr<GradientSync> FSDPStrategy::make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                               const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                               std::function<bool()> stop_wish) {
  if (options_.sharding_strategy() == ShardingStrategy::kNoShard) {
    // The reduce dtype as DDP's compression hook of the same dtype.
    const DDPCommHook hook = options_.reduce_dtype() == ReduceDtype::kFloat16    ? DDPCommHook::kFp16Compress
                             : options_.reduce_dtype() == ReduceDtype::kBFloat16 ? DDPCommHook::kBf16Compress
                                                                                 : DDPCommHook::kAllreduce;
    return std::make_unique<DistributedDataParallel>(
        std::move(module), group, DistributedDataParallelOptions().stop_wish(std::move(stop_wish)).comm_hook(hook));
  }
  FlatShardOptions flat;
  if (options_.sharding_strategy() == ShardingStrategy::kHybridShard) hybrid_groups(flat);
  flat.free_parameters = options_.sharding_strategy() == ShardingStrategy::kFullShard ||
                         options_.sharding_strategy() == ShardingStrategy::kHybridShard;
  flat.min_num_params = options_.auto_wrap_min_num_params();
  flat.reduce_dtype = options_.reduce_dtype();
  flat.backward_prefetch = options_.backward_prefetch();
  return std::make_unique<FlatShard>(std::move(module), group, flat);
}

void FSDPStrategy::hybrid_groups(FlatShardOptions& flat) {
  // Nodes of equal size, their ranks consecutive (torchrun's, SLURM's and our
  // launcher's layout): node n holds global ranks n * L .. n * L + L - 1.
  const ClusterEnvironment& environment = *cluster_environment();
  const int64_t local = environment.local_world_size().value_or(0);
  const bool laid_out = local > 0 && world_size() % local == 0 &&
                        global_rank() == environment.node_rank() * local + local_rank();
  if (!reduce_boolean_decision(laid_out, /*all=*/true)) {
    throw ValueError(c10::str(
        "strategy fsdp: sharding_strategy HYBRID_SHARD shards within a node and replicates across nodes, so it ",
        "needs nodes of the same number of processes with consecutive ranks (global rank = node_rank * ",
        "local_world_size + local_rank); this rank is ", global_rank(), " of ", world_size(), ", node ",
        environment.node_rank(), ", local rank ", local_rank(), " of ",
        local > 0 ? std::to_string(local) : std::string("an unknown number"),
        laid_out ? " (another rank is not so laid out)" : "", ". Use FULL_SHARD, or launch with torchrun, srun or ",
        "num_nodes"));
  }
  const int64_t nodes = world_size() / local;
  if (nodes == 1) return;  // one node: FULL_SHARD over every rank
  if (hybrid_local_size_ != local) {
    // Made once per process, as the process group is.
    std::vector<int64_t> shard, replicate;
    const int64_t node = global_rank() / local;
    for (int64_t r = 0; r < local; ++r) shard.push_back(node * local + r);
    for (int64_t n = 0; n < nodes; ++n) replicate.push_back(n * local + local_rank());
    shard_group_ = new_group(c10::str("fsdp_hybrid_node", node, "_of", nodes), shard);
    replicate_group_ = new_group(c10::str("fsdp_hybrid_local", local_rank(), "_of", local), replicate);
    hybrid_local_size_ = local;
  }
  flat.shard_group = shard_group_;
  flat.replicate_group = replicate_group_;
}

OptimizerConfig FSDPStrategy::setup_optimizers(LightningModule& module) {
  // Before the first step: a sharded save would bypass a CheckpointIO of one's own.
  LT_CHECK_VALUE(options_.state_dict_type() != StateDictType::kSharded || !has_checkpoint_io() ||
                     dynamic_cast<TorchCheckpointIO*>(&checkpoint_io()) != nullptr,
                 "strategy fsdp: state_dict_type: sharded writes its folder of rank files itself (torch.save's format, ",
                 "plugins/io/sharded_checkpoint.h), as Lightning's FSDP writes sharded checkpoints with ",
                 "torch.distributed.checkpoint, so the CheckpointIO this strategy was given would not write them. ",
                 "Use state_dict_type: full (written through it), or leave the default TorchCheckpointIO");
  OptimizerConfig config = ParallelStrategy::setup_optimizers(module);
  FlatShard* flat = flat_shard();
  // Each rank unscales its shards' gradients: a gradient scaler's verdict is
  // every rank's (PyTorch's ShardedGradScaler), so all skip a step or none.
  std::function<torch::Tensor(const torch::Tensor&)> agree;
  if (flat != nullptr) agree = [this](const torch::Tensor& found) { return reduce(found, ReduceOp::kMax); };
  precision().set_found_inf_reduction(std::move(agree));
  if (flat == nullptr) return config;
  LT_CHECK_VALUE(config.optimizers.size() == 1, "strategy fsdp: ", sharding(), " shards one optimizer; ",
                 "configure_optimizers() returned ", config.optimizers.size(), " (use sharding_strategy NO_SHARD)");
  torch::optim::Optimizer& optimizer = *config.optimizer;
  const bool supported = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr ||
                         dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr ||
                         dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr;
  LT_CHECK_VALUE(supported, "strategy fsdp: ", sharding(), " shards the state of SGD, Adam and AdamW; ",
                 "configure_optimizers() returned another optimizer (use sharding_strategy NO_SHARD)");
  LT_CHECK_VALUE(optimizer.param_groups().size() == 1, "strategy fsdp: ", sharding(), " steps its units' flat chunks, so the ",
                 "optimizer needs one parameter group; configure_optimizers() gave ", optimizer.param_groups().size(),
                 " (per-group options are not sharded yet: use sharding_strategy NO_SHARD)");
  std::unordered_set<const c10::TensorImpl*> trainable;
  for (const auto& p : flat->parameters()) trainable.insert(p.unsafeGetTensorImpl());
  std::unordered_set<const c10::TensorImpl*> given;
  for (const auto& p : optimizer.param_groups()[0].params()) given.insert(p.unsafeGetTensorImpl());
  LT_CHECK_VALUE(given == trainable, "strategy fsdp: the optimizer must step exactly the module's trainable ",
                 "parameters (", trainable.size(), "); it was given ", given.size(),
                 " others or a part of them (use sharding_strategy NO_SHARD)");
  optimizer.param_groups()[0].params() = flat->shards();
  optimizer.state().clear();
  return config;
}

std::string FSDPStrategy::sharding() const { return OptionCodec<ShardingStrategy>::show(options_.sharding_strategy()); }

c10::Dict<std::string, torch::Tensor> FSDPStrategy::module_state(LightningModule& module) {
  deferred_.clear();  // a checkpoint's dump starts here
  FlatShard* flat = flat_shard();
  if (flat == nullptr || flat->whole()) return ParallelStrategy::module_state(module);
  // A freed unit's parameters: placeholders, gathered while the file is written (save_checkpoint).
  std::unordered_map<const c10::TensorImpl*, std::pair<size_t, size_t>> freed;  // parameter -> (unit, j)
  for (size_t u = 0; u < flat->shards().size(); ++u) {
    if (flat->unit_whole(u)) continue;
    const std::vector<size_t>& params = flat->units()[u].params;
    for (size_t j = 0; j < params.size(); ++j) freed[flat->parameters()[params[j]].unsafeGetTensorImpl()] = {u, j};
  }
  std::map<size_t, DeferredUnit> units;
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    auto it = freed.find(p.value().unsafeGetTensorImpl());
    if (it == freed.end()) {
      state.insert(p.key(), p.value().detach());
      continue;
    }
    const auto [u, j] = it->second;
    torch::Tensor placeholder = deferred_tensor(p.value().sizes(), p.value().options());
    DeferredUnit& unit = units.try_emplace(u, DeferredUnit{u, flat->shards()[u], {}}).first->second;
    unit.placeholders.emplace_back(j, placeholder);
    state.insert(p.key(), placeholder);
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) state.insert(b.key(), b.value().detach());
  for (auto& [u, unit] : units) deferred_.push_back(std::move(unit));
  return state;
}

void FSDPStrategy::load_module_state(LightningModule& module, const c10::Dict<std::string, torch::Tensor>& state) {
  FlatShard* flat = flat_shard();
  if (flat == nullptr) return ParallelStrategy::load_module_state(module, state);
  const bool whole = flat->whole();
  {
    auto scope = watch("all_gather of the sharded parameters (loading the module's state)");
    flat->unshard();
  }
  ParallelStrategy::load_module_state(module, state);
  flat->reload_shard();
  if (!whole) flat->reshard();
}

void FSDPStrategy::on_evaluation_start() {
  FlatShard* flat = flat_shard();
  reshard_after_evaluation_ = flat != nullptr && !flat->whole();
  if (!reshard_after_evaluation_) return;
  auto scope = watch("all_gather of the sharded parameters (evaluation)");
  flat->unshard();
}

void FSDPStrategy::on_evaluation_end() {
  if (std::exchange(reshard_after_evaluation_, false)) flat_shard()->reshard();
}

void FSDPStrategy::on_train_end() {
  if (FlatShard* flat = flat_shard()) {
    auto scope = watch("all_gather of the sharded parameters (the module whole after training)");
    flat->unshard();
  }
  ParallelStrategy::on_train_end();
}

c10::IValue FSDPStrategy::optimizer_state(torch::optim::Optimizer& optimizer) {
  FlatShard* flat = flat_shard();
  if (flat == nullptr) return ParallelStrategy::optimizer_state(optimizer);
  return with_optimizer_type<Consolidate>(optimizer, *flat, &deferred_);
}

void FSDPStrategy::load_optimizer_state(torch::optim::Optimizer& optimizer, const c10::IValue& state,
                                        const std::string& where) {
  FlatShard* flat = flat_shard();
  if (flat == nullptr) return ParallelStrategy::load_optimizer_state(optimizer, state, where);
  with_optimizer_type<Reshard>(optimizer, *flat, state, where);
}

void FSDPStrategy::save_checkpoint(const c10::IValue& checkpoint, const std::string& path) {
  std::vector<DeferredUnit> deferred = std::exchange(deferred_, {});
  if (options_.state_dict_type() == StateDictType::kSharded) return save_sharded(checkpoint, path, deferred);
  if (deferred.empty()) return ParallelStrategy::save_checkpoint(checkpoint, path);
  // Every rank sends its chunks unit by unit; global rank 0 writes each
  // unit's values as they arrive, the next unit's gather under way meanwhile
  // (two units in memory, never the whole model). Should the file fail
  // before the gathers, rank 0 still takes part in them.
  bool gathered = false;
  auto values = [&](const DeferredWrite& write) {
    auto scope = watch("gather of the sharded state to rank 0 (writing a checkpoint)");
    gathered = true;
    FlatShard& flat = *flat_shard();
    auto start = [&](size_t k) { return flat.start_gather_unit(deferred[k].unit, deferred[k].chunk, /*root=*/0); };
    ShardCollectives::Gathering next = start(0);
    for (size_t k = 0; k < deferred.size(); ++k) {
      next.work->wait();
      const torch::Tensor full = std::move(next.flat);
      if (k + 1 < deferred.size()) next = start(k + 1);
      if (!full.defined()) continue;
      const DeferredUnit& unit = deferred[k];
      for (const auto& [j, placeholder] : unit.placeholders) {
        write(placeholder, flat.units().parameter_view(unit.unit, j, full));
      }
    }
  };
  if (is_global_zero()) {
    try {
      checkpoint_io().save_checkpoint(checkpoint, path, values);
    } catch (...) {
      if (!gathered) values([](const torch::Tensor&, const torch::Tensor&) {});
      throw;
    }
  } else {
    values([](const torch::Tensor&, const torch::Tensor&) {});
  }
  barrier("save_checkpoint");
}

c10::IValue FSDPStrategy::load_checkpoint(const std::string& path) {
  return checkpoint_io().load_checkpoint(path, /*placeholders=*/flat_shard() != nullptr);
}

void FSDPStrategy::save_sharded(const c10::IValue& checkpoint, const std::string& path,
                                const std::vector<DeferredUnit>& deferred) {
  namespace fs = std::filesystem;
  // Every rank writes its chunks (part k: deferred[k]'s) to its own file at
  // once; then global rank 0 writes meta.pt, which names them: the folder
  // holds the new checkpoint from the moment meta.pt replaces the old one.
  // A failure on any rank is known to all (two decisions), never a hang.
  // The save's token, rank 0's, names its files apart from an earlier save's (not the torch generator's: the run's).
  const auto token = static_cast<uint64_t>(
      broadcast(torch::tensor({static_cast<int64_t>(std::random_device()()) << 32 | std::random_device()()}), 0)
          .item<int64_t>());
  // One file per rank of a shard group (HYBRID_SHARD: the first node's; the other nodes hold the same chunks).
  std::vector<std::string> files;
  if (!deferred.empty()) {
    const int64_t shards = flat_shard()->collectives().world_size();
    for (int64_t r = 0; r < shards; ++r) files.push_back(shard_file_name(r, shards, token));
  }
  std::string error;
  auto attempt = [&](const std::function<void()>& write) {
    try {
      write();
    } catch (const std::exception& e) {
      error = error_message(e);
    }
  };
  auto agree = [&](const char* what) {
    if (reduce_boolean_decision(error.empty(), /*all=*/true)) return;
    throw Error(!error.empty() ? error
                               : c10::str("strategy fsdp: the sharded checkpoint '", path, "' was not saved: another ",
                                          "rank failed to write ", what, " (its error is in its log)"));
  };
  attempt([&] {
    fs::create_directories(path);
    if (global_rank() >= static_cast<int64_t>(files.size())) return;
    std::vector<c10::IValue> parts;
    for (const DeferredUnit& unit : deferred) parts.emplace_back(unit.chunk.contiguous());
    atomic_pickle_save(c10::ivalue::Tuple::create(std::move(parts)), (fs::path(path) / files[global_rank()]).string());
  });
  agree("its file");
  if (is_global_zero()) {
    attempt([&] {
      std::vector<ShardedPlace> places;
      for (size_t k = 0; k < deferred.size(); ++k) {
        for (const auto& [j, placeholder] : deferred[k].placeholders) {
          places.push_back({placeholder, static_cast<int64_t>(k),
                            flat_shard()->units()[deferred[k].unit].offsets[j]});
        }
      }
      write_sharded_meta(checkpoint, path, files, places);
    });
  }
  agree("meta.pt");
}

void FSDPStrategy::clip_gradients(torch::optim::Optimizer& optimizer, double clip_val,
                                  GradientClipAlgorithm algorithm) {
  FlatShard* flat = flat_shard();
  if (flat == nullptr || clip_val <= 0.0) return ParallelStrategy::clip_gradients(optimizer, clip_val, algorithm);
  std::vector<torch::Tensor> grads;
  for (const auto& shard : flat->shards()) {
    if (shard.grad().defined()) grads.push_back(shard.grad());
  }
  if (grads.empty()) return;  // alike on every rank: before the first reduction
  torch::NoGradGuard no_grad;
  if (algorithm == GradientClipAlgorithm::kValue) {
    for (auto& grad : grads) grad.clamp_(-clip_val, clip_val);
    return;
  }
  const double total = gradient_norm(optimizer, 2.0);
  const double coef = clip_val / (total + 1e-6);
  if (coef < 1.0) {
    for (auto& grad : grads) grad.mul_(coef);
  }
}

double FSDPStrategy::gradient_norm(torch::optim::Optimizer& optimizer, double norm_type) {
  FlatShard* flat = flat_shard();
  if (flat == nullptr) return ParallelStrategy::gradient_norm(optimizer, norm_type);
  // The module's gradients are the shards' (the padding's are zero); every rank adds its part.
  std::vector<torch::Tensor> grads;
  for (const auto& shard : flat->shards()) {
    if (shard.grad().defined()) grads.push_back(shard.grad());
  }
  // HYBRID_SHARD: every node holds the same chunks; the norm is one node's.
  const double replicas = static_cast<double>(world_size() / flat->collectives().world_size());
  return gradient_norm_of(grads, norm_type, [this, replicas](double partial, bool inf) {
    const torch::Tensor t = torch::tensor(partial, torch::kDouble);
    return inf ? reduce(t, ReduceOp::kMax).item<double>() : reduce(t, ReduceOp::kSum).item<double>() / replicas;
  });
}

bool FSDPStrategy::all_finite(const std::vector<torch::Tensor>& tensors) {
  const bool local = ParallelStrategy::all_finite(tensors);
  if (flat_shard() == nullptr) return local;
  return reduce_boolean_decision(local, /*all=*/true);
}

}  // namespace lt
