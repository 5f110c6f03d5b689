#include <lightning_cpp/plugins/strategies/fsdp/flat_shard.h>

#include <unordered_set>

#include <torch/csrc/distributed/c10d/comm.hpp>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {
constexpr int64_t kBroadcastBucketBytes = int64_t(250) * 1024 * 1024;
}

// Shadows one micro-batch of the ranks still training (see flat_shard.h).
class FlatShard::JoinHookImpl : public JoinHook {
 public:
  explicit JoinHookImpl(FlatShard& sync) : sync_(sync) {}

  void main_hook() override {
    const bool reduces = sync_.joined_iteration_reduces();
    sync_.shadow_forward();
    if (!reduces) return;
    // A zero gradient: chunk r of the sum is the active ranks' reduced gradient.
    {
      torch::NoGradGuard no_grad;
      sync_.flat_grads_.zero_();
    }
    sync_.zero_grads_ = true;
    sync_.reduce_gradients(/*divisor=*/1.0);
    LT_CHECK(sync_.join_step() != nullptr,
             "strategy fsdp: a rank that ran out of data must step its shard with the others (lockstep Join); "
             "without a join step it would spread a stale shard");
    sync_.join_step()();  // its optimizer step issues the all_gather the others issue
  }

  // The buffers from the last rank to join (the parameters are equal already).
  void post_hook(bool is_last_joiner) override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> buffers;
    for (const auto& b : sync_.module_->buffers(/*recurse=*/true)) {
      if (b.defined()) buffers.push_back(b.detach());
    }
    if (buffers.empty()) return;  // alike on every rank: the same module
    std::vector<torch::Tensor> rank{torch::full({1}, is_last_joiner ? sync_.collectives_.rank() : int64_t(-1),
                                                torch::TensorOptions().dtype(torch::kLong).device(sync_.device_))};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    sync_.group_->allreduce(rank, max)->wait();
    c10d::broadcast_coalesced(sync_.group_, buffers, kBroadcastBucketBytes, static_cast<int>(rank[0].item<int64_t>()));
  }

 private:
  FlatShard& sync_;
};

FlatShard::FlatShard(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group)
    : module_(std::move(module)), group_(std::move(group)), collectives_(group_) {
  LT_CHECK(module_ != nullptr, "strategy fsdp: the module is null");
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module_->parameters(/*recurse=*/true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params_.push_back(p);
  }
  LT_CHECK(!params_.empty(), "strategy fsdp: the module has no trainable parameter");
  const torch::TensorOptions options = params_[0].options();
  device_ = params_[0].device();
  for (const auto& p : params_) {
    LT_CHECK_VALUE(p.dtype() == params_[0].dtype() && p.device() == device_, "strategy fsdp: the module's trainable ",
                   "parameters must share one dtype and device (they are flattened into one buffer); found ",
                   p.dtype(), " on ", p.device(), " and ", params_[0].dtype(), " on ", device_);
  }
  torch::NoGradGuard no_grad;
  {
    // Every rank starts from rank 0's parameters and buffers, as DDP does.
    std::vector<torch::Tensor> states;
    for (const auto& p : module_->parameters(/*recurse=*/true)) states.push_back(p.detach());
    for (const auto& b : module_->buffers(/*recurse=*/true)) {
      if (b.defined()) states.push_back(b.detach());
    }
    c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, 0);
  }
  for (const auto& p : params_) {
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  const int64_t world = collectives_.world_size();
  const int64_t s = (numel_ + world - 1) / world;
  flat_params_ = torch::zeros({world * s}, options.requires_grad(false));
  flat_grads_ = torch::zeros({world * s}, options.requires_grad(false));
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    torch::Tensor params = flat_params_.narrow(0, offsets_[i], p.numel());
    params.copy_(p.detach().reshape(-1));
    p.set_data(params.view(p.sizes()));
    // Gradients accumulate in place into the flat buffer (AccumulateGrad adds to a defined gradient).
    p.mutable_grad() = flat_grads_.narrow(0, offsets_[i], p.numel()).view(p.sizes());
  }
  shard_ = flat_params_.narrow(0, collectives_.rank() * s, s).clone().requires_grad_(true);
}

FlatShard::~FlatShard() {
  for (auto* work : {&heartbeat_, &grad_sync_work_}) {
    if (!*work) continue;
    try {
      (*work)->wait();
    } catch (const std::exception&) {
      // Destroyed after a failed step: the error has been reported already.
    }
  }
  // The module keeps its parameters (views of the flat buffer) and plain gradients.
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad() = p.grad().detach().clone();
  }
}

void FlatShard::reload_shard() {
  torch::NoGradGuard no_grad;
  shard_.copy_(flat_params_.narrow(0, collectives_.rank() * shard_.numel(), shard_.numel()));
}

torch::Tensor FlatShard::gather(const torch::Tensor& chunk) const {
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::empty({chunk.numel() * collectives_.world_size()}, chunk.options());
  collectives_.all_gather(chunk.detach().contiguous().reshape(-1), flat);
  return flat;
}

void FlatShard::before_forward() {
  heartbeat_ = Join::notify_join_context(*this);
  if (join_config().enable && !join_config().scheduled) {
    grad_sync_work_ = grad_sync_flag(/*joined=*/false, nullptr);
    grad_sync_work_->wait();
    grad_sync_work_.reset();
  }
}

void FlatShard::backward(const torch::Tensor& loss) {
  if (zero_grads_) {
    torch::NoGradGuard no_grad;
    flat_grads_.zero_();
    zero_grads_ = false;
  }
  loss.backward();
  double divisor = static_cast<double>(collectives_.world_size());
  if (heartbeat_) {
    heartbeat_->wait();
    // The heartbeat's sum: the ranks with a micro-batch in this iteration.
    if (!divide_by_initial_world_size()) divisor = heartbeat_->result().at(0).item<double>();
    heartbeat_.reset();
  }
  if (!torch::GradMode::is_enabled() || !require_backward_grad_sync()) return;
  zero_grads_ = true;
  reduce_gradients(divisor);
}

void FlatShard::reduce_gradients(double divisor) {
  torch::NoGradGuard no_grad;
  if (divisor != 1.0) flat_grads_.div_(divisor);
  torch::Tensor& grad = shard_.mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(shard_.detach());
  collectives_.reduce_scatter(flat_grads_, grad);
}

void FlatShard::after_optimizer_step() {
  torch::NoGradGuard no_grad;
  collectives_.all_gather(shard_.detach(), flat_params_);
}

std::unique_ptr<JoinHook> FlatShard::join_hook() { return std::make_unique<JoinHookImpl>(*this); }

}  // namespace lt
