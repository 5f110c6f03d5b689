#pragma once
// FlatShard: the gradient sync of the fsdp strategy (fsdp.h). The module's
// trainable parameters are views of one flat buffer, padded to W * S
// elements (W ranks, S = ceil(N / W) for N parameter elements); rank r owns
// chunk r, `shard()`, a leaf tensor of S elements that the optimizer steps
// (so the optimizer state holds S elements per rank, not N). The module's
// gradients are views of a second flat buffer of W * S elements.
//
// Collectives of one micro-batch, in this order (rank r, active):
//   before_forward   1. the Join heartbeat (Join::notify_join_context), under a Join
//                       that is not scheduled;
//                    2. under such a Join: allreduce of ones(1) (zeros(1) under
//                       no_sync), telling joined ranks whether 3 follows;
//   backward         3. when it reduces (a window's end): the flat gradient,
//                       divided by W (or by the ranks active in this micro-batch:
//                       the heartbeat's sum), reduce_scatter'ed; chunk r becomes
//                       shard().grad. The module's gradients keep this rank's
//                       local sum until the next window's first backward.
//   after the optimizer step (after_optimizer_step)
//                    4. all_gather of the shards into the flat parameters: every
//                       rank again holds the whole, updated module.
// A joined rank's main_hook issues 2 with zeros (or asks the schedule), and
// when 3 follows, 3 with a zero gradient: chunk r of the sum is the ranks'
// reduced gradient, which it takes as shard().grad before calling the join
// step (lockstep Join), whose optimizer step issues 4 like the others'. So
// every rank's shard equals the single-optimizer window rule. PyTorch's Join
// (no join step) is refused: a joined rank would not step its chunk, and 4
// would spread its stale chunk to every rank (PyTorch's
// ZeroRedundancyOptimizer under Join is silently wrong this way).
// post_hook: the buffers (BatchNorm statistics) from the last rank to join.
//
// Parameters are whole on every rank between steps (what PyTorch calls
// SHARD_GRAD_OP keeps sharded between steps and gathers before each forward:
// the same bytes per step, gathered at the step's end instead); the
// gradients' reduction and the optimizer state are sharded.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <lightning_cpp/plugins/distributed/shard_collectives.h>
#include <lightning_cpp/plugins/join/gradient_sync.h>

namespace lt {

class FlatShard : public GradientSync {
 public:
  // Collective: broadcasts rank 0's parameters and buffers, then builds the flat buffers.
  FlatShard(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group);
  ~FlatShard() override;

  // This rank's chunk of the flat parameters: what the optimizer steps.
  const torch::Tensor& shard() const { return shard_; }
  // The module's trainable parameters, in the flat buffer's order (each once).
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // Where parameter i starts in the flat buffer, and the buffer's padded size (W * S).
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t padded_numel() const { return flat_params_.numel(); }
  int64_t numel() const { return numel_; }
  const ShardCollectives& collectives() const { return collectives_; }
  // shard() from the flat parameters (after they were loaded).
  void reload_shard();
  // A flat tensor of W * S elements (each rank's chunk of `chunk` laid out in
  // rank order): a collective (all_gather).
  torch::Tensor gather(const torch::Tensor& chunk) const;

  // -- GradientSync --------------------------------------------------------------------------
  void before_forward() override;
  void after_forward(const std::vector<torch::Tensor>& /*outputs*/) override {}
  void backward(const torch::Tensor& loss) override;
  void after_optimizer_step() override;

  // -- Joinable ----------------------------------------------------------------------------------
  std::unique_ptr<JoinHook> join_hook() override;
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return group_; }

 private:
  class JoinHookImpl;
  // 3: divides the flat gradient by `divisor`, reduce_scatters it, chunk r into shard().grad.
  void reduce_gradients(double divisor);

  std::shared_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  ShardCollectives collectives_;
  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
  torch::Tensor flat_params_;  // W * S: the parameters are views of it
  torch::Tensor flat_grads_;   // W * S: the parameters' gradients are views of it
  torch::Tensor shard_;        // S, a leaf: the optimizer's parameter
  c10::intrusive_ptr<c10d::Work> heartbeat_;
  c10::intrusive_ptr<c10d::Work> grad_sync_work_;
  bool zero_grads_ = false;  // the module's gradients hold the last window's: zero before the next backward
};

}  // namespace lt
