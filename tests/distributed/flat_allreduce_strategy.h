#pragma once
// A test-only parallel strategy: ParallelStrategy (launch, process group,
// watchdog, sharding, the no_sync + Join epoch context, collectives) with a
// gradient sync of its own instead of DDP's Reducer. At the backward that ends
// a window it allreduces every gradient in ONE flat buffer, in reverse
// parameter order (DDP: buckets from the Reducer, the first iteration in one
// bucket, then rebuilt in the order gradients became ready). It carries no
// agreed stop, so the ranks agree on a stop through the watchdog's store.
// What the join matrix shows: Join, lockstep Join, scheduled Join and
// padding windows come from the foundation, not from DDP.

#include <memory>
#include <vector>

#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/strategies/parallel.h>

namespace lt::testing {

class FlatAllreduceSync : public GradientSync {
 public:
  FlatAllreduceSync(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group)
      : module_(std::move(module)), group_(std::move(group)) {
    for (const auto& p : module_->parameters()) {
      if (p.requires_grad()) params_.insert(params_.begin(), p);  // reversed
    }
    device_ = params_.front().device();
    torch::NoGradGuard no_grad;
    for (auto& p : params_) broadcast(p, 0);  // every rank starts from rank 0's parameters
  }

  // Nothing of its own before the forward: the Join prologue (the heartbeat,
  // the grad-sync flag) is GradientSync::before_forward's.
  void forward_collectives() override {}
  void after_forward(const std::vector<torch::Tensor>& /*outputs*/) override {}
  void backward(const torch::Tensor& loss) override {
    loss.backward();
    double divisor = static_cast<double>(group_->getSize());
    if (auto heartbeat = take_heartbeat()) {
      heartbeat->wait();
      // The heartbeat's sum is the number of ranks with data in this micro-batch.
      if (!divide_by_initial_world_size()) divisor = heartbeat->result()[0].item<double>();
    }
    if (!require_backward_grad_sync()) return;
    std::vector<torch::Tensor> grads;
    for (auto& p : params_) grads.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros_like(p).view(-1));
    torch::Tensor flat = torch::cat(grads).div_(divisor);  // pre-divided, as the Reducer does
    allreduce(flat);
    adopt(flat);
  }

  std::unique_ptr<JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return group_; }

 private:
  class Hook : public JoinHook {
   public:
    explicit Hook(FlatAllreduceSync& sync) : sync_(sync) {}
    // A joined rank: the flag (or the schedule), the collective layers, then a
    // zero buffer into the others' gradient allreduce; lockstep: their average,
    // and the step.
    void main_hook() override {
      const bool reduces = sync_.joined_iteration_reduces();
      sync_.shadow_forward();
      if (!reduces) return;
      int64_t numel = 0;
      for (const auto& p : sync_.params_) numel += p.numel();
      torch::Tensor flat = torch::zeros({numel}, sync_.params_.front().options());
      sync_.allreduce(flat);
      if (lt::EpochSteps* steps = sync_.epoch().lockstep) {
        sync_.adopt(flat);
        steps->optimizer_step();
      }
    }
    // Every rank takes the parameters of the highest last joiner.
    void post_hook(bool is_last_joiner) override {
      std::vector<torch::Tensor> params;
      for (auto& p : sync_.params_) params.push_back(p.detach());
      broadcast_from_last_joiner(sync_, std::move(params), is_last_joiner);
    }

   private:
    FlatAllreduceSync& sync_;
  };

  torch::Tensor allreduce(torch::Tensor t) {
    std::vector<torch::Tensor> tensors{t};
    group_->allreduce(tensors)->wait();
    return t;
  }
  void broadcast(torch::Tensor t, int64_t root) {
    std::vector<torch::Tensor> tensors{t};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    group_->broadcast(tensors, options)->wait();
  }
  // Takes the reduced flat buffer as every parameter's gradient.
  void adopt(const torch::Tensor& flat) {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (auto& p : params_) {
      torch::Tensor part = flat.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
      if (p.grad().defined()) {
        p.mutable_grad().copy_(part);
      } else {
        p.mutable_grad() = part.clone();
      }
    }
  }

  std::shared_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<torch::Tensor> params_;
  torch::Device device_{torch::kCPU};
};

class FlatAllreduceStrategy : public ParallelStrategy {
 public:
  std::string name() const override { return "flat_allreduce"; }
  ParallelSettings settings;  // what parallel_settings() gives the base; may change between runs

 protected:
  ParallelSettings parallel_settings() const override { return settings; }
  std::unique_ptr<GradientSync> make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                   std::function<bool()> /*stop_wish*/) override {
    return std::make_unique<FlatAllreduceSync>(std::move(module), group);
  }
};

}  // namespace lt::testing
