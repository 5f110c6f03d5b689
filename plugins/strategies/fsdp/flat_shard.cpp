#include <lightning_cpp/plugins/strategies/fsdp/flat_shard.h>

#include <utility>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/strategy.h>

namespace lt {

namespace {
constexpr int64_t kBroadcastBucketBytes = int64_t(250) * 1024 * 1024;

std::shared_ptr<torch::nn::Module> not_null(std::shared_ptr<torch::nn::Module> module) {
  LT_CHECK(module != nullptr, "strategy fsdp: the module is null");
  return module;
}
}  // namespace

// Shadows one micro-batch of the ranks still training (see flat_shard.h).
class FlatShard::JoinHookImpl : public JoinHook {
 public:
  explicit JoinHookImpl(FlatShard& sync) : sync_(sync) {}

  void main_hook() override {
    const bool reduces = sync_.joined_iteration_reduces();
    sync_.GradientSync::shadow_forward();  // the collective layers' (their own group)
    sync_.divisor_ = 1.0;                  // the zeros it sends need none
    sync_.sequence_.start(reduces);
    sync_.replay(reduces);
    if (!reduces) return;
    LT_CHECK(sync_.epoch().lockstep != nullptr,
             "strategy fsdp: a rank that ran out of data must step its shard with the others (lockstep Join); "
             "without a join step it would spread a stale shard");
    sync_.epoch().lockstep->optimizer_step();  // its optimizer step issues the gathers the others issue
  }

  // The buffers from the last rank to join (the parameters are equal already).
  void post_hook(bool is_last_joiner) override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> buffers;
    for (const auto& b : sync_.module_->buffers(/*recurse=*/true)) {
      if (b.defined()) buffers.push_back(b.detach());
    }
    if (buffers.empty()) return;  // alike on every rank: the same module
    broadcast_from_last_joiner(sync_, std::move(buffers), is_last_joiner);
  }

 private:
  FlatShard& sync_;
};

FlatShard::FlatShard(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group,
                     FlatShardOptions options)
    : module_(not_null(std::move(module))),
      group_(std::move(group)),
      collectives_(options.shard_group ? options.shard_group : group_),
      replicate_group_(options.replicate_group),
      free_parameters_(options.free_parameters),
      backward_prefetch_(options.backward_prefetch == BackwardPrefetch::kBackwardPre),
      units_(*module_, collectives_.world_size(), collectives_.rank(), options.min_num_params),
      sequence_(units_.names()),
      device_(units_.parameters()[0].device()),
      state_(units_.size()) {
  if (options.reduce_dtype == ReduceDtype::kFloat16) reduce_dtype_ = torch::kHalf;
  if (options.reduce_dtype == ReduceDtype::kBFloat16) {
    LT_CHECK_VALUE(collectives_.native(), "strategy fsdp: reduce_dtype bfloat16 needs the nccl backend: Gloo ",
                   "(LibTorch 1.13) cannot reduce bfloat16 tensors; use float16");
    reduce_dtype_ = torch::kBFloat16;
  }
  torch::NoGradGuard no_grad;
  {
    // Every rank starts from rank 0's parameters and buffers, as DDP does:
    // here the frozen ones, the trainable ones unit by unit below (in place,
    // so that the module is never twice in memory).
    std::vector<torch::Tensor> states;
    for (const auto& p : module_->parameters(/*recurse=*/true)) {
      if (!p.requires_grad()) states.push_back(p.detach());
    }
    for (const auto& b : module_->buffers(/*recurse=*/true)) {
      if (b.defined()) states.push_back(b.detach());
    }
    if (!states.empty()) c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, 0);
  }
  const std::vector<torch::Tensor>& params = units_.parameters();
  shard_data_ = torch::zeros({units_.shard_numel()}, params[0].options().requires_grad(false));
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatUnit& unit = units_[u];
    storage_.add(units_.flat_numel(u), params[unit.params[0]].options());
    torch::Tensor& full = storage_.full(u);
    for (size_t j = 0; j < unit.params.size(); ++j) {
      units_.parameter_view(u, j, full).copy_(params[unit.params[j]].detach());
    }
    std::vector<torch::Tensor> from_rank0{full};
    group_->broadcast(from_rank0)->wait();
    for (size_t j = 0; j < unit.params.size(); ++j) {
      torch::Tensor p = params[unit.params[j]];
      p.set_data(units_.parameter_view(u, j, full));
    }
    torch::Tensor chunk = units_.chunk_of_shard(u, shard_data_);
    chunk.copy_(units_.chunk_of_flat(u, full));
    // The optimizer's parameter for this unit: a leaf whose bytes are its part of shard_data_.
    shards_.push_back(chunk.detach().requires_grad_(true));
    for (size_t i : unit.params) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
      hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, u](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (in_micro_batch_ && ++state_[u].ready == units_[u].params.size()) on_ready(u);
            return outputs;
          })));
      accumulators_.push_back(std::move(accumulator));
    }
    if (unit.declared != nullptr) unit.declared->set_unit_hooks(this);
  }
}

FlatShard::~FlatShard() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  bool emptied = false;
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatUnit& unit = units_[u];
    if (unit.declared != nullptr) unit.declared->set_unit_hooks(nullptr);
    if (storage_.materialized(u)) continue;
    // A run that failed with the parameters sharded: no collective can make
    // them whole here; empty tensors fail where they are used, not at random.
    for (size_t i : unit.params) {
      torch::Tensor p = units_.parameters()[i];
      p.set_data(torch::empty({0}, p.options()));
    }
    emptied = true;
  }
  if (emptied) {
    rank_zero_warn("strategy fsdp: the run ended with the parameters sharded (FULL_SHARD), so the module's sharded ",
                   "parameters are now empty; load a checkpoint to use the module");
  }
}

ShardCollectives::Gathering FlatShard::start_gather_unit(size_t u, const torch::Tensor& chunk, int64_t root) const {
  LT_INTERNAL_ASSERT(chunk.numel() == units_.at(u).chunk && chunk.is_contiguous(), "FlatShard::start_gather_unit: ",
                     "a chunk of ", chunk.numel(), " elements for unit '", units_[u].name, "' of ", units_[u].chunk);
  torch::NoGradGuard no_grad;
  return collectives_.start_gather(chunk.detach().reshape(-1), root);
}

// -- a unit's parameters, whole or freed ------------------------------------------------------------

void FlatShard::gather(size_t u) {
  torch::NoGradGuard no_grad;
  storage_.materialize(u);
  collectives_.all_gather(units_.chunk_of_shard(u, shard_data_), storage_.full(u));
}

void FlatShard::free(size_t u) {
  if (!free_parameters_) return;
  if (prefetch_ && sequence_.collectives()[prefetch_pos_ - 1].unit == u) return;  // its gather under way: needed next
  storage_.free(u);
}

void FlatShard::unshard() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!storage_.materialized(u)) gather(u);
  }
}

bool FlatShard::whole() const {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!storage_.materialized(u)) return false;
  }
  return true;
}

void FlatShard::reshard() {
  if (canonical()) return;  // every unit stays whole until the sequence is known
  for (size_t u = 0; u < units_.size(); ++u) free(u);
}

void FlatShard::reload_shard() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    LT_INTERNAL_ASSERT(storage_.materialized(u), "FlatShard::reload_shard with unit '", units_[u].name, "' sharded");
    units_.chunk_of_shard(u, shard_data_).copy_(units_.chunk_of_flat(u, storage_.full(u)));
  }
}

// -- gradients ------------------------------------------------------------------------------------

void FlatShard::accumulate_in_place(size_t u) {
  UnitState& state = state_[u];
  if (state.grads.defined() || !torch::GradMode::is_enabled()) return;
  torch::NoGradGuard no_grad;
  state.grads = storage_.buffer(u).zero_();
  const FlatUnit& unit = units_[u];
  for (size_t j = 0; j < unit.params.size(); ++j) {
    torch::Tensor p = units_.parameters()[unit.params[j]];
    torch::Tensor view = units_.parameter_view(u, j, state.grads);
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
  }
}

void FlatShard::reduce(size_t u) {
  const FlatUnit& unit = units_[u];
  torch::NoGradGuard no_grad;
  // The unit's gradients, flat: accumulated there in place (a declared unit), or gathered into a buffer.
  torch::Tensor flat = std::exchange(state_[u].grads, torch::Tensor());
  if (!flat.defined()) {
    flat = storage_.buffer(u).zero_();
    for (size_t j = 0; j < unit.params.size(); ++j) {
      const torch::Tensor& p = units_.parameters()[unit.params[j]];
      if (p.grad().defined()) units_.parameter_view(u, j, flat).copy_(p.grad());
    }
  }
  for (size_t i : unit.params) {
    torch::Tensor p = units_.parameters()[i];
    p.mutable_grad() = torch::Tensor();
  }
  torch::Tensor& grad = shards_[u].mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(shards_[u]);
  // In reduce_dtype as c10d's FP16_COMPRESS hook: cast, then divide (no overflow), reduce, cast back.
  if (reduce_dtype_) flat = flat.to(*reduce_dtype_);  // the float32 buffer back to the pool
  if (divisor_ != 1.0) flat.div_(divisor_);
  torch::Tensor chunk = reduce_dtype_ ? torch::empty({unit.chunk}, flat.options()) : grad;
  collectives_.reduce_scatter(flat, chunk);
  if (replicate_group_) {
    // HYBRID_SHARD: the sum of the nodes' reduced chunks (the replicas hold the same chunk of every rank's sum).
    std::vector<torch::Tensor> across{chunk};
    replicate_group_->allreduce(across)->wait();
  }
  if (reduce_dtype_) grad.copy_(chunk);
}

// -- the sequence --------------------------------------------------------------------------------

void FlatShard::event(UnitOp op, size_t u) {
  if (op == UnitOp::kGather) state_[u].gathered = true;
  if (canonical()) {
    sequence_.record({op, u});
    return;
  }
  sequence_.expect({op, u});
  issue(op, u);
}

void FlatShard::issue(UnitOp op, size_t u) {
  if (op == UnitOp::kGather) {
    sequence_gather(u);
    return;
  }
  free(u);  // first: the parameters' bytes are not needed for the reduction
  reduce(u);
}

void FlatShard::replay(bool reduces) {
  sequence_.set_reduces(reduces);
  if (canonical()) {
    if (!reduces) return;
    for (size_t u = units_.size(); u-- > 0;) reduce(u);
    share_sequence(/*has_record=*/false);
    return;
  }
  while (const auto c = sequence_.next()) {
    if (c->op == UnitOp::kGather) {
      sequence_gather(c->unit);
    } else {
      reduce(c->unit);
    }
  }
  LT_INTERNAL_ASSERT(!prefetch_, "FlatShard: a prefetched gather not waited for");
  for (size_t u = 0; u < units_.size(); ++u) free(u);
}

void FlatShard::sequence_gather(size_t u) {
  if (prefetch_ && prefetch_pos_ == sequence_.position()) {
    std::exchange(prefetch_, {})->wait();  // unit u's, started by the G before
  } else {
    gather(u);
  }
  if (!backward_prefetch_ || !sequence_.in_backward()) return;
  const std::optional<size_t> next = sequence_.next_gather();
  if (!next || sequence_.collectives()[*next].unit == u) return;
  const size_t v = sequence_.collectives()[*next].unit;
  storage_.materialize(v);
  prefetch_ = collectives_.start_all_gather(units_.chunk_of_shard(v, shard_data_), storage_.full(v));
  prefetch_pos_ = *next + 1;
}

void FlatShard::share_sequence(bool has_record) {
  std::vector<torch::Tensor> v{sequence_.encode(has_record).to(device_)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  group_->allreduce(v, max)->wait();
  for (size_t u = 0; u < units_.size(); ++u) free(u);
  // Every rank padded this micro-batch (a window that ends past every rank's
  // data, as the rest of an epoch resumed mid-window can): each reduced in the
  // canonical order, and the window stays canonical (after_optimizer_step
  // gathers the units back).
  sequence_.adopt(v[0]);
}

// -- one micro-batch --------------------------------------------------------------------------------

void FlatShard::forward_collectives() {
  in_micro_batch_ = true;
  shadowing_ = false;
  sequence_.start(require_backward_grad_sync());
  canonical_next_ = 0;
  for (UnitState& state : state_) {
    state.gathered = !free_parameters_;
    state.ready = 0;
    state.done = false;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (free_parameters_ && units_[u].declared == nullptr) event(UnitOp::kGather, u);
  }
}

void FlatShard::shadow_forward() {
  GradientSync::shadow_forward();
  shadowing_ = true;
}

void FlatShard::enter(FSDPUnitBase& declared) {
  const size_t u = units_.index_of(declared);
  if (in_micro_batch_) {
    if (free_parameters_ && !state_[u].gathered) event(UnitOp::kGather, u);
    return;
  }
  // Outside a training micro-batch (an evaluation, and the time between
  // epochs, have every unit whole): a sharded unit is gathered for this
  // forward only, so every rank must run it.
  if (!storage_.materialized(u)) {
    gather(u);
    state_[u].gathered_outside = true;
  }
}

void FlatShard::leave(FSDPUnitBase& declared, const std::vector<torch::Tensor>& outputs) {
  const size_t u = units_.index_of(declared);
  if (!free_parameters_) return;
  if (!in_micro_batch_) {
    if (std::exchange(state_[u].gathered_outside, false)) free(u);
    return;
  }
  if (torch::GradMode::is_enabled()) {
    // An output of another type cannot be found again in backward: the unit
    // stays gathered until its gradients are reduced.
    if (outputs.empty()) return;
    for (const auto& output : outputs) {
      if (!output.defined() || !output.requires_grad()) continue;
      output.register_hook([this, u](const torch::Tensor& grad) {
        pre_backward(u);
        return grad;
      });
    }
  }
  state_[u].gathered = false;
  if (!canonical()) free(u);
}

void FlatShard::pre_backward(size_t u) {
  if (!in_micro_batch_ || state_[u].done) return;
  if (!state_[u].gathered) event(UnitOp::kGather, u);
  accumulate_in_place(u);
}

void FlatShard::on_ready(size_t u) {
  UnitState& state = state_[u];
  if (state.done) return;
  state.done = true;
  if (sequence_.reduces()) {
    if (canonical()) {
      sequence_.record({UnitOp::kReduce, u});
      // Canonical: reduce from the last unit down, each once those after it are done.
      while (canonical_next_ < units_.size() && state_[units_.size() - 1 - canonical_next_].done) {
        const size_t next = units_.size() - 1 - canonical_next_++;
        free(next);  // the canonical window ends with this backward: nothing gathers it before
        reduce(next);
      }
    } else {
      event(UnitOp::kReduce, u);
    }
  } else if (!canonical()) {
    free(u);
  }
  state.gathered = !free_parameters_;
}

void FlatShard::end_backward() {
  // Units some of whose parameters got no gradient, from the last.
  for (size_t u = units_.size(); u-- > 0;) on_ready(u);
  if (!canonical()) {
    LT_INTERNAL_ASSERT(!prefetch_, "FlatShard: a prefetched gather not waited for");
    // Under no_sync the sequence without its reduce_scatters.
    sequence_.check_complete();
  } else if (sequence_.reduces()) {
    share_sequence(/*has_record=*/true);
  }
  in_micro_batch_ = false;
}

void FlatShard::backward(const torch::Tensor& loss) {
  divisor_ = static_cast<double>(group_->getSize());
  if (auto heartbeat = take_heartbeat()) {
    heartbeat->wait();
    // The heartbeat's sum: the ranks with a micro-batch in this iteration.
    if (!divide_by_initial_world_size()) divisor_ = heartbeat->result().at(0).item<double>();
  }
  const bool reduces = torch::GradMode::is_enabled() && require_backward_grad_sync();
  if (std::exchange(shadowing_, false)) {
    // A padding micro-batch: the rest of the others' collectives, with the
    // gradients this rank's window accumulated so far.
    replay(reduces);
    in_micro_batch_ = false;
    return;
  }
  sequence_.set_reduces(reduces);
  sequence_.mark_backward_start();
  loss.backward();
  end_backward();
}

void FlatShard::after_optimizer_step() {
  // In the canonical window every unit is whole when a micro-batch starts.
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!free_parameters_ || canonical()) gather(u);
  }
}

std::unique_ptr<JoinHook> FlatShard::join_hook() { return std::make_unique<JoinHookImpl>(*this); }

}  // namespace lt
