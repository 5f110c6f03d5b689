#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>

#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

// Needs torch/csrc/distributed/autograd/context/context.h, which some
// LibTorch packages lack: see plugins/strategies/ddp/c10d_compat/.
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/default_comm_hooks.hpp>  // BuiltinCommHookType
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/torch_compat.h>

namespace lt {

// PyTorch's _DDPJoinHook.
class DistributedDataParallel::JoinHookImpl : public JoinHook {
 public:
  explicit JoinHookImpl(DistributedDataParallel& ddp) : ddp_(ddp) {}

  // Shadows one iteration of pre_forward/post_forward/backward of the ranks
  // still training (the protocol table, plugins/join/gradient_sync.h).
  void main_hook() override {
    // The Join prologue's flag first (GradientSync::before_forward's order).
    const bool should_sync_backwards = ddp_.joined_iteration_reduces();
    // Buckets are rebuilt only once during a training period.
    ddp_.rebuild_buckets();
    ddp_.check_and_sync_module_buffers();
    // Where the others run the module's forward and backward (on a group of their own).
    ddp_.shadow_forward();
    // Forward parameter sync is off in the next iteration if this one skips
    // gradient sync.
    ddp_.set_require_forward_param_sync(should_sync_backwards);
    if (!should_sync_backwards) return;
    std::vector<c10d::GradBucket> buckets = ddp_.match_all_reduce_for_bwd_pass();
    torch::Tensor used;
    if (ddp_.options().find_unused_parameters()) used = ddp_.match_unused_params_allreduce();
    // Rebuilt parameters are pushed only once during a training period.
    ddp_.push_rebuilt_params_for_all_indices();
    // Lockstep: the sum this rank shadowed with zeros is the ranks' averaged
    // gradient; take it as this rank's own and step with the others.
    if (EpochSteps* steps = ddp_.epoch().lockstep) {
      ddp_.adopt_reduced_gradients(buckets, used);
      steps->optimizer_step();
    }
  }

  void post_hook(bool is_last_joiner) override { ddp_.sync_final_model(is_last_joiner); }

 private:
  DistributedDataParallel& ddp_;
};

namespace {

// PyTorch's bf16_compress_hook, as c10d's FP16CompressCommHook in bfloat16.
// (A CommHookInterface: CppCommHookInterface's result parser is not exported
// by LibTorch 1.13.)
class Bf16CompressHook : public c10d::CommHookInterface {
 public:
  explicit Bf16CompressHook(c10::intrusive_ptr<c10d::ProcessGroup> process_group)
      : process_group_(std::move(process_group)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<torch::Tensor> compressed{bucket.getBufferRef().to(torch::kBFloat16)};
    compressed[0].div_(process_group_->getSize());
    auto future = process_group_->allreduce(compressed)->getFuture();
    torch::Tensor decompressed = bucket.getBufferRef();
    return future->then(
        [decompressed](c10::ivalue::Future& done) {
          decompressed.copy_(done.value().toTensorVector()[0]);
          return c10::IValue(decompressed);
        },
        future->elementType());
  }
  torch::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
};

// The Reducer's checks throw c10::Error, whose what() carries a C++
// backtrace; users get the message alone, with the rank.
template <typename F>
void rethrow_with_rank(int64_t rank, const char* where, F&& body) {
  try {
    body();
  } catch (const c10::Error& e) {
    throw Error(c10::str("DistributedDataParallel (rank ", rank, ", ", where, "): ", e.what_without_backtrace()));
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), process_group_(std::move(process_group)), options_(options) {
  LT_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  LT_CHECK(process_group_, "DistributedDataParallel: the process group is null");
  LT_CHECK(options_.bucket_cap_mb() > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got ",
           options_.bucket_cap_mb());
  rank_ = process_group_->getRank();
  world_size_ = process_group_->getSize();

  // The Reducer's parameters: those that require grad, each once (a module
  // may share a parameter between submodules), in named_parameters order.
  std::unordered_map<size_t, std::string> param_names;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    param_names[parameters_.size()] = item.key();
    parameters_.push_back(p);
  }
  LT_CHECK(!parameters_.empty(),
           "DistributedDataParallel: the module has no parameter that requires a gradient; there is nothing to "
           "synchronize");
  device_ = parameters_.front().device();
  for (const auto& p : parameters_) {
    LT_CHECK(p.device() == device_, "DistributedDataParallel: every parameter must be on one device; found ",
             device_, " and ", p.device());
  }
  if (options_.stop_wish()) {
    stop_flag_ = torch::zeros({1}, torch::TensorOptions().device(device_)).requires_grad_(true);
    param_names[parameters_.size()] =
        "(lightning-cpp's agreed-stop flag: backward must go through the strategy, as manual_backward)";
    parameters_.push_back(stop_flag_);
  }

  // Same parameter shapes on every rank (a clear error instead of a hang),
  // then everyone starts from rank 0's parameters and buffers.
  c10d::verify_params_across_processes(process_group_, parameters_, c10::nullopt);
  {
    torch::NoGradGuard no_grad;
    auto states = module_states();
    if (!states.empty()) c10d::broadcast_coalesced(process_group_, states, kBroadcastBucketBytes, 0);
  }

  // PyTorch 1.13: without find_unused_parameters the first iteration runs
  // with a single bucket, because parameter order may not match the order
  // in which gradients become ready; buckets are rebuilt from the observed
  // order after it. With find_unused_parameters buckets are never rebuilt.
  const size_t cap = static_cast<size_t>(options_.bucket_cap_mb() * 1024.0 * 1024.0);
  std::vector<size_t> limits;
  if (options_.find_unused_parameters()) {
    limits = {static_cast<size_t>(c10d::kDefaultFirstBucketBytes), cap};
  } else {
    limits = {static_cast<size_t>(std::numeric_limits<int64_t>::max())};
  }
  const std::vector<bool> expect_sparse(parameters_.size(), false);
  auto [buckets, per_bucket_limits] = c10d::compute_bucket_assignment_by_size(parameters_, limits, expect_sparse);
  // Reversed: gradients of the last layers are ready first.
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(per_bucket_limits.begin(), per_bucket_limits.end());
  reducer_ = compat::make_reducer<c10d::Reducer>(parameters_, std::move(buckets), std::move(per_bucket_limits),
                                                 process_group_, expect_sparse, static_cast<int64_t>(cap),
                                                 options_.find_unused_parameters(),
                                                 options_.gradient_as_bucket_view(), std::move(param_names),
                                                 c10d::kDefaultFirstBucketBytes);
  // PyTorch's DDP gives its Reducer a Logger at construction, and the Reducer
  // assumes one: with find_unused_parameters, an iteration whose set of unused
  // parameters differs from the previous one's (toggle_optimizer, a branch
  // taken on some batches) reports the graph as not static through it, and
  // without it dereferenced a null Logger (a segmentation fault).
  logger_ = std::make_shared<c10d::Logger>(reducer_);
  reducer_->set_logger(logger_);
  switch (options_.comm_hook()) {
    case DDPCommHook::kAllreduce:
      break;
    case DDPCommHook::kFp16Compress:
      reducer_->register_builtin_comm_hook(c10d::BuiltinCommHookType::FP16_COMPRESS);
      break;
    case DDPCommHook::kBf16Compress:
      LT_CHECK_VALUE(process_group_->getBackendName() == "nccl", "ddp_comm_hook: bf16_compress_hook needs the nccl ",
                     "backend: Gloo (LibTorch 1.13) cannot allreduce bfloat16 tensors; use fp16_compress_hook");
      reducer_->register_comm_hook(std::make_unique<Bf16CompressHook>(process_group_));
      break;
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<torch::Tensor> DistributedDataParallel::module_buffers() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : module_->buffers(/*recurse=*/true)) {
    if (b.defined()) out.push_back(b);
  }
  return out;
}

std::vector<torch::Tensor> DistributedDataParallel::module_states() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : module_->parameters(/*recurse=*/true)) out.push_back(p.detach());
  for (const auto& b : module_buffers()) out.push_back(b.detach());
  return out;
}

void DistributedDataParallel::forward_collectives() {
  rethrow_with_rank(rank_, "forward", [&] { pre_forward_impl(); });
}

void DistributedDataParallel::pre_forward_impl() {
  const bool grad_enabled = torch::GradMode::is_enabled();
  if (grad_enabled && require_backward_grad_sync()) {
    ++num_iterations_;
    reducer_->prepare_for_forward();
  }
  // The heartbeat (this rank has not joined) the prologue sent: its sum divides
  // the gradients where divide_by_initial_world_size is off.
  if (auto work = take_heartbeat()) reducer_->set_forward_pass_work_handle(work, divide_by_initial_world_size());
  // Before the forward's allocations, to keep the peak memory down; once.
  if (grad_enabled && rebuild_buckets()) has_rebuilt_buckets_ = true;
  if (will_sync_module_buffers()) sync_buffers();
}

void DistributedDataParallel::post_forward(const std::vector<torch::Tensor>& outputs, bool prepare_for_backward) {
  if (torch::GradMode::is_enabled() && require_backward_grad_sync()) {
    require_forward_param_sync_ = true;
    if (prepare_for_backward) {
      std::vector<torch::Tensor> defined;
      if (options_.find_unused_parameters()) {
        for (const auto& t : outputs) {
          if (t.defined()) defined.push_back(t);
        }
      }
      rethrow_with_rank(rank_, "forward", [&] { reducer_->prepare_for_backward(defined); });
    }
  } else {
    require_forward_param_sync_ = false;
  }
}

torch::Tensor DistributedDataParallel::forward(const std::function<torch::Tensor()>& fn) {
  pre_forward();
  torch::Tensor out = fn();
  post_forward({out});
  return out;
}

void DistributedDataParallel::prepare_for_backward(const std::vector<torch::Tensor>& outputs) {
  if (torch::GradMode::is_enabled() && require_backward_grad_sync()) {
    require_forward_param_sync_ = true;
    std::vector<torch::Tensor> defined;
    if (options_.find_unused_parameters()) {
      for (const auto& t : outputs) {
        if (t.defined()) defined.push_back(t);
      }
    }
    rethrow_with_rank(rank_, "backward", [&] {
      if (rebuild_buckets()) has_rebuilt_buckets_ = true;
      reducer_->prepare_for_backward(defined);
    });
  } else {
    require_forward_param_sync_ = false;
  }
}

void DistributedDataParallel::backward(const torch::Tensor& loss) {
  std::vector<torch::Tensor> roots{loss};
  std::vector<torch::Tensor> grads{torch::Tensor()};  // ones for a scalar loss, as loss.backward()
  if (stop_flag_.defined() && torch::GradMode::is_enabled() && require_backward_grad_sync()) {
    // A node of its own (a view), so that find_unused_parameters sees the flag used.
    roots.push_back(stop_flag_.view({1}));
    // A fresh tensor: the flag's AccumulateGrad may keep it as the gradient.
    grads.push_back(torch::full({1}, options_.stop_wish()() ? 1.0 : 0.0, stop_flag_.options()));
    stop_reduced_ = true;
  }
  prepare_for_backward(roots);
  torch::autograd::backward(roots, grads);
}

std::optional<bool> DistributedDataParallel::take_agreed_stop() {
  if (!std::exchange(stop_reduced_, false)) return std::nullopt;
  torch::Tensor& sum = stop_flag_.mutable_grad();
  if (!sum.defined()) return false;
  const bool stop = sum.item<float>() > 0.0f;
  sum.zero_();
  return stop;
}

void DistributedDataParallel::reset_agreed_stop() {
  stop_reduced_ = false;
  if (stop_flag_.defined() && stop_flag_.grad().defined()) stop_flag_.mutable_grad().zero_();
}

bool DistributedDataParallel::will_sync_module_buffers() const {
  return require_forward_param_sync_ && options_.broadcast_buffers() && !module_buffers().empty();
}

void DistributedDataParallel::sync_buffers() {
  torch::NoGradGuard no_grad;
  // Under Join, rank 0 may have joined already and hold stale buffers: the
  // highest active rank is the authority instead.
  const int64_t authoritative = join_config().enable ? find_common_rank(rank_, true) : 0;
  sync_module_buffers(authoritative);
}

void DistributedDataParallel::check_and_sync_module_buffers() {
  if (!will_sync_module_buffers()) return;
  const int64_t authoritative = find_common_rank(rank_, false);
  sync_module_buffers(authoritative);
}

void DistributedDataParallel::sync_module_buffers(int64_t authoritative_rank) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module_buffers()) buffers.push_back(b.detach());
  if (buffers.empty()) return;
  // Synchronous: waits for every broadcast it issues.
  c10d::broadcast_coalesced(process_group_, buffers, kBroadcastBucketBytes, static_cast<int>(authoritative_rank));
}

int64_t DistributedDataParallel::find_common_rank(int64_t input_rank, bool rank_cond) {
  LT_INTERNAL_ASSERT(input_rank == process_group_->getRank(), "find_common_rank of another rank");
  const int64_t common = lt::find_common_rank(*this, rank_cond);
  LT_CHECK(common != -1, "DistributedDataParallel (rank ", rank_,
           "): no rank was a candidate for the common rank; this is a bug in the Join bookkeeping");
  return common;
}

std::vector<c10d::GradBucket> DistributedDataParallel::match_all_reduce_for_bwd_pass() {
  // The Reducer's bucket order (rebuilt or not) with zeros of each bucket's
  // shape: a joined rank contributes nothing to the sum.
  std::vector<c10d::GradBucket> buckets = reducer_->get_grad_buckets(/*return_zero_tensors=*/true);
  if (stop_flag_.defined() && options_.stop_wish()()) {
    // This rank's wish to stop rides in its zero bucket (take_agreed_stop).
    for (auto& bucket : buckets) {
      const std::vector<torch::Tensor> params = bucket.getParameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].is_same(stop_flag_)) bucket.getGradients()[i].fill_(1.0);
      }
    }
  }
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  futures.reserve(buckets.size());
  // The default comm hook allreduces each bucket's buffer in place.
  for (auto& bucket : buckets) futures.push_back(reducer_->run_comm_hook(bucket));
  for (auto& future : futures) {
    future->wait();
    if (future->hasError()) future->value();  // rethrows the collective's error
  }
  return buckets;
}

torch::Tensor DistributedDataParallel::match_unused_params_allreduce() {
  std::vector<torch::Tensor> t{reducer_->get_local_used_map_on_device()};
  process_group_->allreduce(t)->wait();
  return t[0];
}

void DistributedDataParallel::adopt_reduced_gradients(const std::vector<c10d::GradBucket>& buckets,
                                                      const torch::Tensor& used) {
  const std::vector<std::vector<int64_t>> indices = bucket_indices();
  LT_INTERNAL_ASSERT(indices.size() == buckets.size(), indices.size(), " bucket index lists for ", buckets.size(),
                     " buckets");
  torch::NoGradGuard no_grad;
  if (stop_flag_.defined()) stop_reduced_ = true;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const std::vector<torch::Tensor> grads = buckets[b].getGradients();
    LT_INTERNAL_ASSERT(grads.size() == indices[b].size(), "bucket ", b, " has ", grads.size(), " gradients for ",
                       indices[b].size(), " parameters");
    for (size_t i = 0; i < grads.size(); ++i) {
      const int64_t index = indices[b][i];
      // A parameter no rank used this iteration keeps its gradient, as the Reducer leaves it on the others.
      if (used.defined() && used[index].item<int64_t>() == 0) continue;
      torch::Tensor& grad = parameters_[static_cast<size_t>(index)].mutable_grad();
      if (grad.defined()) {
        grad.copy_(grads[i]);
      } else {
        grad = grads[i].clone();
      }
    }
  }
}

void DistributedDataParallel::sync_final_model(bool is_last_joiner) {
  // The last rank to join holds the final model; ties go to the larger rank.
  broadcast_from_last_joiner(*this, module_states(), is_last_joiner);
}

bool DistributedDataParallel::rebuild_buckets() { return reducer_->rebuild_buckets(); }

void DistributedDataParallel::push_rebuilt_params_for_all_indices() {
  reducer_->push_rebuilt_params_for_all_indices();
}

void DistributedDataParallel::detach_gradient_views() {
  if (!options_.gradient_as_bucket_view()) return;
  for (auto& p : parameters_) {
    if (p.grad().defined() && p.grad().is_view()) p.mutable_grad() = p.grad().detach();
  }
}

std::unique_ptr<JoinHook> DistributedDataParallel::join_hook() { return std::make_unique<JoinHookImpl>(*this); }

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_indices() const {
  std::unordered_map<const c10::TensorImpl*, int64_t> index;
  for (size_t i = 0; i < parameters_.size(); ++i) index[parameters_[i].unsafeGetTensorImpl()] = static_cast<int64_t>(i);
  std::vector<std::vector<int64_t>> out;
  for (const auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
    std::vector<int64_t> ids;
    for (const auto& p : bucket.getParameters()) ids.push_back(index.at(p.unsafeGetTensorImpl()));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace lt
