#pragma once
// FlatShard: the gradient sync of the fsdp strategy (fsdp.h).
//
// The units, their flat buffers and a rank's shard: flat_units.h. The
// optimizer's parameters are shards(): one leaf per unit (the rank's chunk,
// views of one buffer of S elements), so its state takes S elements per rank,
// not N, and a step's temporaries a unit's chunk at a time. Where the units'
// bytes live: unit_storage.h; the order of their collectives, learned and
// then held to: collective_sequence.h. This class wires them to autograd.
//
// Freeable units (FULL_SHARD: every unit) keep only their chunk between
// micro-batches: `full`'s storage is freed (resized to 0 bytes, so that what
// autograd saved of the parameters sees it again when it is gathered back).
// SHARD_GRAD_OP keeps every unit whole and gathers it after each step.
//
// A unit's collectives: G(u), the all_gather of the ranks' chunks into
// `full`; R(u), once the unit's parameters' gradients are all accumulated
// (AccumulateGrad post hooks) in a micro-batch that reduces (a window's end):
// its gradients flattened (zeros for a parameter that got none; cast to
// reduce_dtype), divided by W (or by the ranks active in this micro-batch,
// divide_by_initial_world_size false), reduce_scattered into its part of
// shards()[u].grad; the module's gradients are dropped, and a freeable unit
// is freed. With a shard group (HYBRID_SHARD) W is its size and G(u) and R(u)
// are within it; R(u) is followed by an allreduce (sum) of the reduced chunk
// over the replicate group, and the divisor stays the whole group's; the Join
// heartbeat, the sequence's MAX and the buffers' broadcast are over the whole
// group.
// The collectives of an iteration, in order, and what a joined rank runs to
// match each: plugins/join/gradient_sync.h, the protocol table.
// Between epochs (end_epoch) and for an evaluation the module is whole
// (every freed unit gathered, in unit order); the next micro-batch frees it
// again as it goes.
// The order of a micro-batch's G and R is autograd's; it is the same on every
// rank for the same graph, but a rank that ran out of data (Join), or pads its
// last window, must issue it without running the graph. So:
//   - until the first micro-batch that reduces, every unit stays whole and the
//     R(u) go in reverse unit order (the canonical window: no G at all; a
//     freeable unit is freed once reduced), while each rank records what its
//     G and R would be; at that micro-batch's end every rank (joined ones
//     with -1) allreduces MAX its record: from then on every rank holds the
//     sequence (where every rank padded that micro-batch, none has a record: the
//     window stays canonical, the units gathered back after the step);
//   - after it, an active rank checks each collective against the sequence
//     before issuing it (a graph that changes its units' order is an error,
//     not a silent mismatch), and a rank with no micro-batch replays it:
//     G with its own chunk, R with the gradients it holds (zeros once
//     joined; the window's earlier micro-batches when padding). A micro-batch
//     under no_sync issues the sequence without its R.
// Backward prefetch (BACKWARD_PRE): from the sequence's first collective in
// backward on, issuing a G starts the sequence's next G (a unit's gather
// overlaps the gradients of the unit before it), which that G then waits
// for: the same collectives in the same order on every rank, replays
// included. In backward every unit the next G names has been freed after its
// forward, so at most two units' gathers are alive, as PyTorch's.
// A joined rank then steps its shard with the reduced gradient (lockstep
// Join: the join step), whose after_optimizer_step gathers the units that are
// not freeable as the others' does. So every rank's shard equals the
// single-optimizer window rule.
// PyTorch's Join (no join step) is refused: a joined rank would not step its
// chunk (PyTorch's ZeroRedundancyOptimizer under Join is silently wrong so).
// post_hook: the buffers (BatchNorm statistics) from the last rank to join.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <lightning_cpp/plugins/distributed/shard_collectives.h>
#include <lightning_cpp/plugins/join/gradient_sync.h>
#include <lightning_cpp/plugins/strategies/fsdp/collective_sequence.h>
#include <lightning_cpp/plugins/strategies/fsdp/flat_units.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_unit.h>
#include <lightning_cpp/plugins/strategies/fsdp/unit_storage.h>

namespace lt {

// The dtype gradients are reduced in (fsdp's reduce_dtype).
enum class ReduceDtype { kFloat32, kFloat16, kBFloat16 };
// PyTorch's BackwardPrefetch: kBackwardPre starts the next unit's gather in
// backward when a unit's gather is issued, before its gradients are computed.
enum class BackwardPrefetch { kBackwardPre, kNone };

struct FlatShardOptions {
  // FULL_SHARD: free each unit's parameters between uses (else SHARD_GRAD_OP: whole between steps).
  bool free_parameters = false;
  // > 0: also a unit for each submodule with at least this many parameters not in a unit.
  int64_t min_num_params = 0;
  // Not float32: a unit's flat gradients are cast to it, divided, reduce_scattered, and cast back into
  // the shard's gradient (ddp's fp16/bf16 compression hooks: the same values on 2 ranks).
  ReduceDtype reduce_dtype = ReduceDtype::kFloat32;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kNone;
  // HYBRID_SHARD: the ranks a unit is sharded over (a node's), null for the
  // whole group; and the group of the ranks that hold the same chunk (one per
  // node), over which each reduced chunk is then allreduced, null for none.
  c10::intrusive_ptr<c10d::ProcessGroup> shard_group;
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group;
};

class FlatShard : public GradientSync, private FSDPUnitHooks {
 public:
  // Collective: broadcasts rank 0's parameters and buffers (over `group`, every rank), then builds the units.
  FlatShard(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group,
            FlatShardOptions options);
  ~FlatShard() override;

  // The units: the parameters' partition, over the shard group's ranks.
  const FlatUnits& units() const { return units_; }
  // This rank's chunk of each unit, in unit order: what the optimizer steps
  // (their gradients: the reduced ones, once a micro-batch reduced them).
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  // The module's trainable parameters, each once, in the module's order.
  const std::vector<torch::Tensor>& parameters() const { return units_.parameters(); }
  const ShardCollectives& collectives() const { return collectives_; }
  // Whether unit u's parameters hold their values on this rank (not freed).
  bool unit_whole(size_t u) const { return storage_.materialized(u); }
  // A collective, started (ShardCollectives::start_gather): unit u's flat
  // buffer (W * S_u elements) made of every rank's `chunk` of it (S_u
  // elements: shards()[u], or a tensor shaped like it, an optimizer's state;
  // contiguous, alive until the wait) on rank `root`; undefined on the others.
  ShardCollectives::Gathering start_gather_unit(size_t u, const torch::Tensor& chunk, int64_t root) const;

  // Collective: every unit's parameters whole (gathered where freed), until reshard().
  void unshard();
  // Frees the freeable units' parameters (outside the canonical window).
  void reshard();
  // Whether every unit's parameters are whole.
  bool whole() const;
  // shards() from the module's parameters (after they were loaded; unshard() first).
  void reload_shard();

  // -- GradientSync --------------------------------------------------------------------------
  // After the Join prologue: the gathers of the freeable units not declared (lt::FSDPUnit).
  void forward_collectives() override;
  void after_forward(const std::vector<torch::Tensor>& /*outputs*/) override {}
  void backward(const torch::Tensor& loss) override;
  void after_optimizer_step() override;
  // The module whole between epochs (a user's evaluation, a checkpoint).
  void end_epoch() override { unshard(); }
  void shadow_forward() override;

  // -- Joinable ----------------------------------------------------------------------------------
  std::unique_ptr<JoinHook> join_hook() override;
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return group_; }

 private:
  class JoinHookImpl;
  // What one micro-batch did to a unit so far.
  struct UnitState {
    bool gathered = true;           // as the sequence sees it (while learning: recorded, not real)
    size_t ready = 0;               // parameters whose gradient accumulated in this backward
    bool done = false;              // reduced (or freed) in this backward
    bool gathered_outside = false;  // gathered for a forward outside a micro-batch (freed after it)
    torch::Tensor grads;            // W * S_u: where its parameters' gradients accumulate (declared units)
  };

  // -- FSDPUnitHooks ---------------------------------------------------------------------------
  void enter(FSDPUnitBase& unit) override;
  void leave(FSDPUnitBase& unit, const std::vector<torch::Tensor>& outputs) override;

  void pre_backward(size_t u);
  void on_ready(size_t u);
  void end_backward();
  // One collective of the sequence: issued (or, while it is learned, recorded).
  void event(UnitOp op, size_t u);
  void issue(UnitOp op, size_t u);
  // The rest of the sequence, from here, for a rank with no micro-batch.
  void replay(bool reduces);
  void share_sequence(bool has_record);
  void gather(size_t u);
  // A G of the sequence, the one just taken: the prefetched one waited for, or issued; then the next
  // started (backward prefetch).
  void sequence_gather(size_t u);
  void reduce(size_t u);
  // The unit's gradients accumulate in one flat buffer, that reduce() hands to the collective as it is.
  void accumulate_in_place(size_t u);
  void free(size_t u);
  bool canonical() const { return !sequence_.known(); }

  std::shared_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  ShardCollectives collectives_;                            // over the shard group
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group_;  // HYBRID_SHARD's, else null
  bool free_parameters_;                                    // every unit freeable (FULL_SHARD)
  c10::optional<torch::ScalarType> reduce_dtype_;           // set: gradients reduced in it
  bool backward_prefetch_;
  FlatUnits units_;
  UnitStorage storage_;
  CollectiveSequence sequence_;
  torch::Device device_{torch::kCPU};
  std::vector<UnitState> state_;
  torch::Tensor shard_data_;  // S: shards_ are views of it
  std::vector<torch::Tensor> shards_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  // The G at sequence position prefetch_pos_ - 1, started (backward prefetch); null when none.
  c10::intrusive_ptr<c10d::Work> prefetch_;
  size_t prefetch_pos_ = 0;
  bool in_micro_batch_ = false;
  bool shadowing_ = false;  // a padding micro-batch (shadow_forward after before_forward)
  double divisor_ = 1.0;
  size_t canonical_next_ = 0;  // canonical window: units (from the last) reduced so far
};

}  // namespace lt
