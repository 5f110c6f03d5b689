#pragma once
// GradientSync: how a parallel strategy moves gradients between ranks, as the
// training epoch's context (join/epoch_context.h) drives it. DDP implements it
// with c10d's Reducer (strategies/ddp/distributed_data_parallel.h); another
// strategy implements its own and gets no_sync accumulation, lockstep Join,
// scheduled Join, padding windows and the agreed stop from the context.
//
// What an implementation promises, per micro-batch on a rank that has one:
//   before_forward()  its forward-side collectives; under a Join that is not
//                     scheduled (join_config().enable && !scheduled), the
//                     first is Join::notify_join_context(*this) (the heartbeat),
//                     and the last tells joined ranks whether this micro-batch
//                     reduces gradients (unless require_backward_grad_sync()
//                     is known to them from the schedule);
//   after_forward()   what the forward's outputs decide (unused parameters);
//   backward(loss)    reduces the gradients iff require_backward_grad_sync(),
//                     averaged over the initial world size, or with
//                     divide_by_initial_world_size() false over the ranks
//                     active in this micro-batch;
//   release_gradients()  after a window's reduction, before the optimizer
//                     step and zero_grad: the gradients are the optimizer's (an
//                     implementation whose gradients alias its buffers detaches them);
//   after_optimizer_step()  after the step (a sharded sync gathers the
//                     updated shards: a collective every rank issues).
// And per epoch, end_epoch() after its last iteration, on every rank.
// Its JoinHook's main_hook, on a joined rank, issues the same collectives
// with neutral values (a sync it learns of from the flag above, or from
// scheduled_join_sync() when scheduled), and with a join_step() set (lockstep
// Join) copies the reduced gradient into param.grad and calls the step; its
// post_hook leaves every rank with the same parameters and buffers.
//
// The agreed stop (optional): an implementation whose gradient reduction can
// carry every rank's wish to stop returns the reduced wish from
// take_agreed_stop(); one that returns nullopt leaves the agreement to the
// collective watchdog's store (one read per window).

#include <functional>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/plugins/join/join.h>

namespace lt {

class GradientSync : public Joinable {
 public:
  ~GradientSync() override = default;

  // -- one micro-batch ---------------------------------------------------------------
  virtual void before_forward() = 0;
  // `outputs`: what backward starts from.
  virtual void after_forward(const std::vector<torch::Tensor>& outputs) = 0;
  virtual void backward(const torch::Tensor& loss) = 0;
  virtual void release_gradients() {}
  virtual void after_optimizer_step() {}
  // After an epoch's last iteration (and a Join's shadowing), on every rank:
  // a sync that frees parameters between micro-batches makes the module whole
  // for what runs between epochs (a collective).
  virtual void end_epoch() {}

  // -- no_sync -----------------------------------------------------------------------
  bool require_backward_grad_sync() const { return require_backward_grad_sync_; }
  void set_require_backward_grad_sync(bool sync) { require_backward_grad_sync_ = sync; }
  // PyTorch's `with ddp.no_sync():` gradients accumulate locally while the
  // guard lives; the first backward after it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(GradientSync& sync) : sync_(&sync), previous_(sync.require_backward_grad_sync()) {
      sync.set_require_backward_grad_sync(false);
    }
    ~NoSyncGuard() {
      if (sync_ != nullptr) sync_->set_require_backward_grad_sync(previous_);
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept : sync_(other.sync_), previous_(other.previous_) {
      other.sync_ = nullptr;
    }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    GradientSync* sync_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // -- Join, set by the epoch context for one epoch -------------------------------------
  // PyTorch's join(divide_by_initial_world_size).
  bool divide_by_initial_world_size() const { return divide_by_initial_world_size_; }
  void set_divide_by_initial_world_size(bool divide) { divide_by_initial_world_size_ = divide; }
  // Lockstep Join: when set, a joined rank's main_hook, on an iteration in
  // which the others reduce gradients, adopts the reduced gradient and calls
  // this step (the training loop's optimizer step). Unset: PyTorch's Join.
  void set_join_step(std::function<void()> step) { join_step_ = std::move(step); }
  const std::function<void()>& join_step() const { return join_step_; }
  // Scheduled Join (join.h): active ranks send no grad-sync flag; a joined
  // rank's main_hook asks this whether the iteration it shadows reduces
  // gradients, as the schedule tells.
  void set_scheduled_join_sync(std::function<bool()> sync) { scheduled_join_sync_ = std::move(sync); }
  const std::function<bool()>& scheduled_join_sync() const { return scheduled_join_sync_; }

  // -- collective layers (core/collective_layer.h) -----------------------------------
  // Shadows the module's collective layers for a rank with no micro-batch in
  // an iteration: a joined rank's main_hook calls it every iteration, a
  // padding micro-batch after before_forward(). Unset: the module has none.
  // An implementation whose own collectives run inside forward and backward
  // (a sharded sync's gathers) overrides shadow_forward to learn that the
  // micro-batch is a padding one, and shadows them in its backward.
  void set_forward_shadow(std::function<void()> shadow) { forward_shadow_ = std::move(shadow); }
  virtual void shadow_forward() {
    if (forward_shadow_) forward_shadow_();
  }

  // -- the grad-sync flag (a Join that is not scheduled) --------------------------------
  // Allreduce of ones(1) (zeros(1) under no_sync, or from a joined rank) on
  // join_process_group(): tells joined ranks whether this micro-batch reduces
  // gradients. Returns its Work; `result` (if given) is the summed tensor.
  c10::intrusive_ptr<c10d::Work> grad_sync_flag(bool joined, torch::Tensor* result = nullptr) {
    const bool sync = !joined && require_backward_grad_sync();
    const auto options = torch::TensorOptions().device(join_device());
    std::vector<torch::Tensor> t{sync ? torch::ones({1}, options) : torch::zeros({1}, options)};
    if (result != nullptr) *result = t[0];
    return join_process_group()->allreduce(t);
  }
  // In a joined rank's main_hook: whether the micro-batch it shadows reduces
  // gradients, from the schedule (scheduled Join) or from the flag above.
  bool joined_iteration_reduces() {
    if (join_config().scheduled) {
      LT_INTERNAL_ASSERT(scheduled_join_sync(), "scheduled Join without the iterations' gradient syncs");
      return scheduled_join_sync()();
    }
    torch::Tensor flag;
    grad_sync_flag(/*joined=*/true, &flag)->wait();
    return flag.item<double>() != 0.0;
  }

  // -- agreed stop ---------------------------------------------------------------------
  // The reduced wish since the last call (clears it), or nullopt when no
  // reduction carried one since.
  virtual std::optional<bool> take_agreed_stop() { return std::nullopt; }
  // Forgets what was reduced (every rank at the same point: an epoch's start).
  virtual void reset_agreed_stop() {}

 private:
  bool require_backward_grad_sync_ = true;
  bool divide_by_initial_world_size_ = true;
  std::function<void()> join_step_;
  std::function<bool()> scheduled_join_sync_;
  std::function<void()> forward_shadow_;
};

}  // namespace lt
