#pragma once
// DistributedDataParallel: PyTorch 1.13's torch.nn.parallel.DistributedDataParallel
// for one LibTorch module, on c10d::Reducer (the same C++ reducer Python DDP
// uses: autograd hooks on the parameters' gradient accumulators copy each
// ready gradient into its bucket, and a full bucket is allreduced while
// backward goes on).
//
//   lt::DistributedDataParallel ddp(module, process_group);
//   ddp.pre_forward();
//   auto loss = module->forward(x) ...;
//   ddp.post_forward({loss});        // or: auto loss = ddp.forward([&] { return ...; });
//   loss.backward();                 // gradients arrive averaged over the ranks
//
// Construction (collective, every rank): verify_params_across_processes
// (allgather of the parameter shapes), then broadcast_coalesced of every
// parameter and buffer from rank 0, then the Reducer with one bucket for the
// first iteration (find_unused_parameters=false; PyTorch does the same) or
// [1 MiB, bucket_cap_mb...] buckets (find_unused_parameters=true).
//
// pre_forward (PyTorch 1.13's forward, up to the module's) issues the
// forward-side collectives (the protocol table's 1-4: the Join prologue,
// GradientSync::before_forward's, then the bucket rebuild and the buffers;
// the heartbeat's Work goes to the Reducer). The flag comes before the
// rebuild and the buffers here, where PyTorch's DDP sends it after them: the
// prologue is one for every GradientSync, and this rank's main hook matches
// it in the same order. post_forward, where grad is enabled and
// require_backward_grad_sync() holds, sets require_forward_param_sync (else
// clears it) and arms the Reducer (prepare_for_backward, from the outputs with
// find_unused_parameters) unless backward() is to.
// An armed backward reduces the buckets (6): the gradients arrive divided by
// the world size (with Join and divide_by_initial_world_size=false, by the
// number of ranks still active). The join hook is PyTorch's _DDPJoinHook
// (main_hook) and sync_final_model (post_hook).
// The collectives of an iteration, in order, and what a joined rank runs to
// match each: plugins/join/gradient_sync.h, the protocol table.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/torch.h>

#include <lightning_cpp/plugins/join/gradient_sync.h>

namespace c10d {
class Logger;
class Reducer;
}

namespace lt {

// How a gradient bucket is reduced (PyTorch's DDP communication hooks,
// torch.distributed.algorithms.ddp_comm_hooks.default_hooks; Lightning's
// ddp_comm_hook): kAllreduce, the Reducer's own (fp32 sum, pre-divided);
// kFp16Compress, c10d's FP16_COMPRESS (the bucket cast to float16, divided
// by the world size, allreduced, cast back: half the bytes);
// kBf16Compress, the same in bfloat16 (NCCL only: Gloo in LibTorch 1.13
// cannot reduce bfloat16). A joined rank's zero buckets go through the same
// hook, so Join shadows them alike.
enum class DDPCommHook { kAllreduce, kFp16Compress, kBf16Compress };

struct DistributedDataParallelOptions {
  // Gradient bucket size after the first iteration (PyTorch's bucket_cap_mb).
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  // Traverse the autograd graph from the outputs to mark parameters that get
  // no gradient this iteration as ready (a branch unused on some rank).
  TORCH_ARG(bool, find_unused_parameters) = false;
  // param.grad() become views into the flat buckets (saves a copy and memory).
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  // Broadcast buffers (BatchNorm statistics...) before every forward.
  TORCH_ARG(bool, broadcast_buffers) = true;
  TORCH_ARG(DDPCommHook, comm_hook) = DDPCommHook::kAllreduce;
  // Set: the gradient allreduce also carries this rank's wish to stop (see
  // "Agreed stop" below). Every rank sets it alike.
  TORCH_ARG(std::function<bool()>, stop_wish) = nullptr;
};

class DistributedDataParallel : public GradientSync {
 public:
  // Collective: every rank of `process_group` constructs it at the same time.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() const { return *module_; }
  const DistributedDataParallelOptions& options() const { return options_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  torch::Device device() const { return device_; }

  // -- forward: PyTorch's DistributedDataParallel.forward split around the
  // user's forward, so any callable (a LightningModule's training_step) can run in between.
  // GradientSync::before_forward: the Join prologue, then forward_collectives().
  void pre_forward() { before_forward(); }
  // `outputs`: what backward will start from (only read with find_unused_parameters).
  // prepare_for_backward=false leaves Reducer::prepare_for_backward to the caller
  // (manual optimization: called by prepare_for_backward() just before backward).
  void post_forward(const std::vector<torch::Tensor>& outputs, bool prepare_for_backward = true);
  torch::Tensor forward(const std::function<torch::Tensor()>& fn);
  // Lightning's prepare_for_backward(model, output): when the next backward
  // should reduce gradients, rebuild buckets if due and arm the Reducer.
  void prepare_for_backward(const std::vector<torch::Tensor>& outputs);
  // prepare_for_backward, then backward from `loss` and, when this backward
  // reduces gradients and options.stop_wish is set, from the stop flag.
  void backward(const torch::Tensor& loss) override;

  // -- GradientSync: the strategy's view of the above --------------------------------
  void after_forward(const std::vector<torch::Tensor>& outputs) override {
    post_forward(outputs, /*prepare_for_backward=*/false);  // backward() arms the Reducer
  }
  void release_gradients() override { detach_gradient_views(); }

  // -- agreed stop (options.stop_wish) --------------------------------------------
  // A one-element parameter of the Reducer's own (not the module's, so no
  // optimizer, clipping or checkpoint sees it), reduced in the first bucket
  // with the gradients. Every backward that reduces gradients starts from it
  // too, with this rank's stop_wish() (0 or 1) as its gradient, and a joined
  // rank puts its wish into its zero bucket, so after the allreduce every
  // rank holds the same sum: > 0 when some rank wants to stop. It costs no
  // collective of its own (the store read it replaces cost ~10% of a step).
  // The sum since the last call, or nullopt when no backward (nor, lockstep
  // Join, an adopted reduction) reduced gradients since; clears it.
  std::optional<bool> take_agreed_stop() override;
  // Forgets what was reduced (every rank at the same point: an epoch's start).
  void reset_agreed_stop() override;

  // -- gradient sync switches (no_sync: GradientSync) -------------------------------------
  bool require_forward_param_sync() const { return require_forward_param_sync_; }
  void set_require_forward_param_sync(bool sync) { require_forward_param_sync_ = sync; }

  // -- Joinable -------------------------------------------------------------------
  // main_hook: PyTorch's _DDPJoinHook.main_hook; post_hook: sync_final_model.
  std::unique_ptr<JoinHook> join_hook() override;
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return process_group_; }

  // After optimizer.step(), before optimizer.zero_grad(). With
  // gradient_as_bucket_view the Reducer makes each param.grad() a view of its
  // bucket, and LibTorch 1.13's Optimizer::zero_grad() calls grad.detach_(),
  // which views refuse (Python's zero_grad avoids the call). This replaces
  // each such view by a detach()ed alias of the same memory: zero_grad then
  // zeroes the bucket in place, and the Reducer, seeing a gradient that
  // already lives in its bucket, copies nothing. No-op otherwise.
  void detach_gradient_views();

  // -- introspection -----------------------------------------------------------------
  // The parameters the Reducer manages (requires_grad, deduplicated), in its index order.
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  // Reducer parameter indices per bucket, in reduction order.
  std::vector<std::vector<int64_t>> bucket_indices() const;
  bool has_rebuilt_buckets() const { return has_rebuilt_buckets_; }
  int64_t num_iterations() const { return num_iterations_; }
  c10d::Reducer& reducer() const { return *reducer_; }

  // PyTorch's broadcast bucket for parameter and buffer syncs (250 MiB).
  static constexpr size_t kBroadcastBucketBytes = 250u * 1024u * 1024u;

 private:
  // -- the pieces of the forward and of the join hook (PyTorch's private
  // methods; JoinHookImpl, PyTorch's _DDPJoinHook, drives them) ----------------
  class JoinHookImpl;
  // require_forward_param_sync && broadcast_buffers && the module has buffers.
  bool will_sync_module_buffers() const;
  // _sync_buffers: authoritative rank (find_common_rank(rank, true) with
  // Join enabled, else 0), then broadcast of the buffers from it.
  void sync_buffers();
  // _check_and_sync_module_buffers (joined rank): find_common_rank(rank, false), then broadcast.
  void check_and_sync_module_buffers();
  void sync_module_buffers(int64_t authoritative_rank);
  // allreduce(MAX) of (input_rank if rank_cond else -1); throws if every rank sent -1.
  int64_t find_common_rank(int64_t input_rank, bool rank_cond);
  // One zero bucket per gradient bucket, in the Reducer's order, through
  // Reducer::run_comm_hook; waits for all. Returns the buckets, each now
  // holding the other ranks' sum (their averaged gradient).
  std::vector<c10d::GradBucket> match_all_reduce_for_bwd_pass();
  // allreduce of the Reducer's locally-used-parameter map; waited. Returns the reduced map.
  torch::Tensor match_unused_params_allreduce();
  // Lockstep Join: copies the reduced buckets into the parameters' gradients
  // (skipping parameters `used`, if defined, marks unused on every rank).
  void adopt_reduced_gradients(const std::vector<c10d::GradBucket>& buckets, const torch::Tensor& used);
  // find_common_rank(rank, is_last_joiner), then broadcast_coalesced of
  // parameters and buffers from that rank.
  void sync_final_model(bool is_last_joiner);
  // Reducer::rebuild_buckets(); true if they were rebuilt now.
  bool rebuild_buckets();
  void push_rebuilt_params_for_all_indices();

  // The bucket rebuild and the buffers' broadcast (the protocol table's 3, 4).
  void forward_collectives() override;
  void pre_forward_impl();
  std::vector<torch::Tensor> module_buffers() const;
  std::vector<torch::Tensor> module_states() const;  // parameters, then buffers (all of them)

  std::shared_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  DistributedDataParallelOptions options_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> parameters_;
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<c10d::Logger> logger_;  // the Reducer's (it holds a weak_ptr); destroyed first
  bool require_forward_param_sync_ = true;
  bool has_rebuilt_buckets_ = false;
  int64_t num_iterations_ = 0;
  torch::Tensor stop_flag_;    // options.stop_wish: the last of parameters_
  bool stop_reduced_ = false;  // a reduction carried the flag since take_agreed_stop()
};

}  // namespace lt
