#pragma once
// GradientSync: how a parallel strategy moves gradients between ranks, as the
// training epoch's context (join/epoch_context.h) drives it. DDP implements it
// with c10d's Reducer (strategies/ddp/distributed_data_parallel.h); another
// strategy implements its own and gets no_sync accumulation, lockstep Join,
// scheduled Join, padding windows and the agreed stop from the context.
//
// The Join prologue is written here once, for every implementation: before_forward()
// sends the heartbeat (Join::notify_join_context, the table's 1) and, under a Join
// that is not scheduled, the grad-sync flag (2), then runs the implementation's
// forward_collectives(); on a joined rank, its main_hook begins with
// joined_iteration_reduces(), which matches the flag (or asks the schedule).
// What an implementation promises, per micro-batch on a rank that has one:
//   forward_collectives()  its own forward-side collectives, after the prologue;
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
// Its JoinHook's main_hook, on a joined rank, first calls
// joined_iteration_reduces(), then issues the same collectives with neutral
// values, and with epoch().lockstep set (lockstep Join) copies the reduced
// gradient into param.grad and takes the step; its post_hook leaves every
// rank with the same parameters and buffers.
//
// The agreed stop (optional): an implementation whose gradient reduction can
// carry every rank's wish to stop returns the reduced wish from
// take_agreed_stop(); one that returns nullopt leaves the agreement to the
// collective watchdog's store (one read per window).
//
// The protocol table: the collectives of one training iteration of a data-parallel strategy, in order, and what a
// joined rank runs to match each; on the sync's join_process_group() unless said; [..]: only with that option. Under
// Join (uneven_inputs: join) a rank runs ceil(n/k)*k iterations (k: accumulate_grad_batches); those past its n
// batches are padding micro-batches (zero loss), which issue the active column, 5, 8 and FlatShard's backward as a
// joined rank runs them, with the gradients the rank holds. A joined rank (out of data: the epoch context's
// finish()) runs Join::join: per iteration the others run, its allreduce, then the main hooks in the joinables'
// order: the sync's, the strategy's extra joinables' (EpochParts::joinables), logging's, the loop's. Every rank
// runs Join::join in the end, the last ones included.
//
// epoch start     Join, 2+ ranks: allreduce(MAX) of (n, -n), the fewest and the most batches (core/strategy.h's
//                 count_range). no_sync, join_enable: false: the same, and where the counts differ an allgather
//                 that names them, then every rank throws.
//
// part            active rank                                         joined rank (Join::join)
// --------------  --------------------------------------------------  -----------------------------------------------
// DDP: DistributedDataParallel
// before_forward  1 heartbeat: allreduce(ones) (Join::notify_join_    allreduce(zeros); a sum of 0 ends the loop (to
//                   context; its sum, the active ranks, divides the     the post hooks); [throw_on_early_termination:
//                   gradients where divide_by_initial_world_size is     allreduce(ones), throw]; else:
//                   off) [throw_on_early_termination: allreduce
//                   (zeros); a sum > 0: every rank throws]
//                 2 grad-sync flag: allreduce(1, or 0 under no_sync)  DDP main hook: 2 with 0 (joined_iteration_
//                   (1 and 2: GradientSync::before_forward, the Join    reduces): its sum says whether 6, 7 follow,
//                   prologue, for every implementation)
//                 3 bucket rebuild: a broadcast, once (the iteration  3,
//                   after the first reduction) [not find_unused_...]
//                 4 [broadcast_buffers, the module has buffers, the   4, with -1 to the MAX,
//                   last micro-batch not under no_sync]: allreduce
//                   (MAX) names the highest active rank, then the
//                   buffers' broadcast_coalesced from it
// forward and     5 collective layers (core/collective_layer.h), on   5 (shadow_forward),
//   backward        a group of their own
// backward        6 at a window's end: one allreduce per bucket, in   6 with zero buckets (its stop wish in one),
//                   bucket order [stop_wish: the agreed-stop flag in
//                   one] [find_unused_parameters: then the used map]
// the step        7 at a window's end: the optimizer step, with its   lockstep: the buckets' sums as its gradient,
//                   hooks' collectives (and fsdp's: all_finite,         then the same step (epoch().lockstep)
//                   clipping by the norm)
// extra joinables   their own collectives (ParallelStrategy::add_     their main hooks, in order
//                   joinable), after 6's and 7's, before 8
// end_batch       8 sync_dist logging (joinable_logging.h): header    logging's main hook: 8 with -1, zeros, -inf
//                   allreduce(MAX), [values: SUM], [min/max: MAX]
// iteration end   9 after a step, on_after_optimizer_step (Model-     the loop's main hook (EpochSteps::joined_
//   (the loop)      Checkpoint's barrier, the Timer's agreement); at    iteration_end): 9 with the others
//                   a validation point, validation (sync_dist,
//                   EarlyStopping); Fabric's loop: none
// fsdp: FlatShard (flat_shard.h): 1, 2, 5, 8, 9 as DDP's, no 3, 4; its units' collectives instead: G(u), all_gather
// of unit u's chunks, and R(u), its flat gradient reduce_scattered into the shards [HYBRID_SHARD: in the shard group,
// R(u) then an allreduce over the replicate group]. Freeable: every unit under FULL_SHARD, none under SHARD_GRAD_OP.
// before_forward  1, 2, then G(u) of each freeable unit not declared  FlatShard main hook: 2, 5, then the sequence
//                   (lt::FSDPUnit), in unit order                       (the active ranks' G and R, learned once)
// forward           G(u) as a declared freeable unit's forward starts   replayed: G with its own chunk, R with zeros
// backward          G(u) as that unit's output gradient arrives         (no R where 2 says no sync); then 7 by the
//                   [BACKWARD_PRE: it starts the sequence's next G];    join step (without one: an error)
//                   at a window's end R(u) once the unit's gradients
//                   are in, then the units left, from the last
// the step        7, ending with after_optimizer_step's G(u) of each  7 (the join step's)
//                   unit not freeable, in unit order
// until the       no G (every unit whole); at a window's end R(u) in  R(u) in reverse unit order, then the
//   sequence is     reverse unit order, then allreduce(MAX) of what     allreduce(MAX) with -1s
//   known           each rank recorded: the sequence from then on (no
//                   rank recorded, all padding: 7 gathers every unit)
//
// after every rank joined (Join::join's allreduce summed 0, or the schedule ended), the post hooks, in order: DDP's
//   allreduce(MAX) of the last joiners' ranks (find_common_rank), then broadcast_coalesced of the parameters and
//   buffers from the highest; FlatShard's the same for its buffers alone (nothing without buffers). Then end_epoch
//   (FlatShard: G(u) of every freed unit, in unit order). Then, join_mode pytorch or no join step (manual
//   optimization): allreduce(MAX) of global_step.
// scheduled Join (join.h; lockstep with a join step, every count known at the epoch's start,
//   divide_by_initial_world_size): no 1, no 2, no allreduce in Join::join: a joined rank runs the main hooks while
//   the counts and the agreed stops (TrainingEpochContext::stops_after) say the others run, and takes 2's answer
//   from the windows; 8's header is skipped at iterations every rank has a batch of; throw_on_early_termination: a
//   joined rank with an iteration to shadow throws in Join::join, the others at the first iteration past the
//   shortest rank's last window. A signal's stop is agreed in 6 (a joined rank's wish rides in its zero bucket;
//   FlatShard: in the watchdog's store); without the schedule a rank may stop at once, and the others learn it
//   from the watchdog.
// no_sync (uneven_inputs: pad | error), and join_enable: false: every rank runs its n (equal) iterations: no
//   padding, no joined rank, no 1, 2, 8 (no_sync reduces sync_dist values as they are logged); 4 broadcasts from
//   rank 0 (no allreduce); a signal's stop is agreed as under scheduled Join.

#include <functional>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/plugins/join/join.h>

namespace lt {

class EpochSteps;  // core/strategy.h

class GradientSync : public Joinable {
 public:
  // Waits for a heartbeat still in flight (after a failed step: its error was reported already).
  ~GradientSync() override;

  // -- one micro-batch ---------------------------------------------------------------
  // The Join prologue (the heartbeat; the grad-sync flag where Join runs
  // unscheduled), then forward_collectives(); waits for the flag.
  void before_forward();
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
  // What the epoch context tells the sync for one training epoch: set at its
  // start, back to the default (PyTorch's Join, dividing by the initial world
  // size) at its end.
  struct Epoch {
    // PyTorch's join(divide_by_initial_world_size).
    bool divide_by_initial_world_size = true;
    // Lockstep Join: a joined rank's main_hook, on an iteration in which the
    // others reduce gradients, adopts the reduced gradient and takes this
    // step (the loop's). Null: PyTorch's Join.
    EpochSteps* lockstep = nullptr;
    // Scheduled Join (join.h): active ranks send no grad-sync flag; a joined
    // rank's main_hook asks this whether the iteration it shadows reduces
    // gradients, as the schedule tells.
    std::function<bool()> scheduled_reduces;
  };
  void set_epoch(Epoch epoch) { epoch_ = std::move(epoch); }
  const Epoch& epoch() const { return epoch_; }
  bool divide_by_initial_world_size() const { return epoch_.divide_by_initial_world_size; }

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
  // First in a joined rank's main_hook: whether the micro-batch it shadows
  // reduces gradients, from the schedule (scheduled Join) or from the flag
  // above (matching the active ranks' before_forward).
  bool joined_iteration_reduces();

  // -- agreed stop ---------------------------------------------------------------------
  // The reduced wish since the last call (clears it), or nullopt when no
  // reduction carried one since.
  virtual std::optional<bool> take_agreed_stop() { return std::nullopt; }
  // Forgets what was reduced (every rank at the same point: an epoch's start).
  virtual void reset_agreed_stop() {}

 protected:
  // The implementation's forward-side collectives, after the Join prologue
  // (DDP: the bucket rebuild and the buffers' broadcast; FlatShard: its
  // pre-forward gathers).
  virtual void forward_collectives() = 0;
  // This micro-batch's heartbeat (null: no Join, or scheduled), handed over:
  // once waited, its sum is the number of ranks with data in this micro-batch.
  c10::intrusive_ptr<c10d::Work> take_heartbeat() { return std::move(heartbeat_); }

 private:
  c10::intrusive_ptr<c10d::Work> heartbeat_;
  bool require_backward_grad_sync_ = true;
  Epoch epoch_;
  std::function<void()> forward_shadow_;
};

}  // namespace lt
