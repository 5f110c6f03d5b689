#pragma once
// CollectiveSequence: the order of a micro-batch's unit collectives, learned
// once and then held to (flat_shard.h says what they are and why).
// The collectives of an iteration, in order, and what a joined rank runs to
// match each: plugins/join/gradient_sync.h, the protocol table.
//
// Invariants:
//   - Until known(), the sequence is being learned: a micro-batch that reduces
//     records its collectives; encode() and adopt() share one record between
//     ranks (an elementwise MAX over ranks: ranks without a record send -1).
//   - Once known(), every micro-batch runs it from position 0: an active rank
//     checks each collective with expect(), a rank without data takes them
//     with next(). A micro-batch that does not reduce (no_sync) runs the
//     sequence without its reductions.
//   - No collective is issued here: this is bookkeeping, pure and
//     single-process; the shard issues what it is told.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace lt {

enum class UnitOp : int64_t { kGather = 0, kReduce = 1 };

struct UnitCollective {
  UnitOp op;
  size_t unit;
  bool operator==(const UnitCollective& other) const { return op == other.op && unit == other.unit; }
};

class CollectiveSequence {
 public:
  // `unit_names` name the units in errors ("" is the root).
  explicit CollectiveSequence(std::vector<std::string> unit_names);

  bool known() const { return !sequence_.empty(); }
  const std::vector<UnitCollective>& collectives() const { return sequence_; }

  // A micro-batch starts (or, for a rank without one, its replay): position 0,
  // an empty record; `reduces`: whether it runs the reductions.
  void start(bool reduces);
  void set_reduces(bool reduces) { reduces_ = reduces; }
  bool reduces() const { return reduces_; }

  // -- learning (!known()) -----------------------------------------------------------------
  void record(UnitCollective c);
  const std::vector<UnitCollective>& recorded() const { return record_; }
  // Backward starts here (its collectives are the ones a prefetch may start early).
  void mark_backward_start();
  // [length, backward start, the record as op * units + unit, then -1s], or
  // every element -1 without a record; length: max_length() + 2.
  torch::Tensor encode(bool has_record) const;
  // The MAX over ranks of encode()'s tensors: the record becomes the sequence
  // (when any rank had one). Returns known().
  bool adopt(const torch::Tensor& maxed);
  // Longer records are refused (a unit called many times in one forward).
  int64_t max_length() const;

  // -- holding to it (known()) ----------------------------------------------------------------
  // This micro-batch's next collective is `c`: throws lt::Error naming the
  // collective expected where it is not.
  void expect(UnitCollective c);
  // For a rank without data: the next collective of the sequence, or none at its end.
  std::optional<UnitCollective> next();
  // How far this micro-batch has come (collectives expected or taken).
  size_t position() const { return pos_; }
  // Whether the last collective taken was in backward.
  bool in_backward() const { return pos_ > backward_start_; }
  // The index of the first gather at position() or after, none at the end.
  std::optional<size_t> next_gather() const;
  // At a micro-batch's end: throws lt::Error unless every collective it
  // should run (reductions only when it reduces) ran.
  void check_complete() const;

 private:
  bool counted(const UnitCollective& c) const { return reduces_ || c.op == UnitOp::kGather; }
  std::string describe(const UnitCollective& c) const;

  std::vector<std::string> names_;
  std::vector<UnitCollective> sequence_;
  std::vector<UnitCollective> record_;
  size_t backward_start_ = 0;
  size_t pos_ = 0;
  bool reduces_ = true;
};

}  // namespace lt
