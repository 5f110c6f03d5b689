#pragma once
// Join for uneven inputs, with the semantics of PyTorch's
// torch.distributed.algorithms.join (1.13). Facts, not code, carried over.
//
// An active rank's first Joinable calls Join::notify_join_context() at the
// start of each of its iterations: the heartbeat, allreduce(ones(1)) (async),
// and with throw_on_early_termination a blocking allreduce(zeros(1)) whose
// non-zero sum makes every active rank throw EarlyTerminationError. A rank out
// of inputs calls join(): while its allreduce(zeros(1)) sums to more than 0
// (the active ranks), with throw_on_early_termination allreduce(ones(1)) and
// throw, else every JoinHook's main_hook(), in the joinables' order, each
// shadowing its Joinable's collectives of one iteration; then every
// post_hook(is_last_joiner), true on the ranks that ran no main hook. A warning
// is printed once if a joined rank shadows more than 1000 iterations.
//
// Scheduled Join (not in PyTorch; a JoinSchedule given): when every rank can
// tell, without a collective, whether the ranks still training run another
// iteration (every rank's count is known, and stops are agreed), the heartbeat
// tells nothing new: active ranks send no heartbeat and no check, and join()
// runs the main hooks while the schedule says another iteration runs, then the
// post hooks; with throw_on_early_termination a joined rank with iterations to
// shadow throws in join(), the others where their schedule says the first rank
// ran out (the Joinable's caller knows the iteration).
//
// The collectives of an iteration, in order, and what a joined rank runs to
// match each: plugins/join/gradient_sync.h, the protocol table.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>

namespace lt {

class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Shadows the collectives of one iteration of an active rank.
  virtual void main_hook() {}
  // After all ranks joined (e.g. DDP broadcasts the final model from the last joiner).
  virtual void post_hook(bool /*is_last_joiner*/) {}
};

struct JoinConfig {
  bool enable = false;
  bool throw_on_early_termination = false;
  bool is_first_joinable = false;
  bool scheduled = false;  // every rank's iteration count is known: no heartbeat
};

// Scheduled Join: on a joined rank, whether the ranks still training run
// another iteration.
using JoinSchedule = std::function<bool()>;

class Joinable {
 public:
  virtual ~Joinable() = default;
  virtual std::unique_ptr<JoinHook> join_hook() = 0;
  virtual torch::Device join_device() const = 0;
  virtual c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const = 0;
  const JoinConfig& join_config() const { return join_config_; }
  // Set by Join for the duration of the context.
  void set_join_config(const JoinConfig& config) { join_config_ = config; }

 private:
  JoinConfig join_config_;
};

// The highest rank of `joinable`'s process group where `candidate` is true
// (PyTorch DDP's _find_common_rank): one allreduce(MAX) every rank issues;
// -1 where no rank was a candidate.
int64_t find_common_rank(const Joinable& joinable, bool candidate);
// The end of a post_hook whose ranks must all leave with the last joiner's
// state (ties: the highest rank): find_common_rank(is_last_joiner), then a
// coalesced broadcast of `tensors` from it (none where `tensors` is empty).
void broadcast_from_last_joiner(const Joinable& joinable, std::vector<torch::Tensor> tensors, bool is_last_joiner);

// Thrown on every rank with throw_on_early_termination once any rank ran out of inputs.
class EarlyTerminationError : public Error {
 public:
  using Error::Error;
};

class Join {
 public:
  // Like `with Join(joinables, enable, throw_on_early_termination):` entering.
  Join(std::vector<Joinable*> joinables, bool enable = true, bool throw_on_early_termination = false,
       JoinSchedule schedule = nullptr);
  // Resets the joinables' configs; issues no collective (an exception
  // propagating through the epoch leaves Join without shadowing, as in PyTorch).
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Leaving the context normally: shadow until every rank joined, then post hooks.
  void join();

  // Called by a Joinable at the start of each of its iterations; returns the
  // heartbeat's Work (null if this is not the first joinable or Join is off).
  static c10::intrusive_ptr<c10d::Work> notify_join_context(Joinable& joinable);

  static constexpr int64_t kWarnThreshold = 1000;

 private:
  int64_t num_nonjoined_procs();
  [[noreturn]] void notify_procs_to_terminate();

  std::vector<Joinable*> joinables_;
  std::vector<std::unique_ptr<JoinHook>> hooks_;
  bool enable_;
  bool throw_on_early_termination_;
  JoinSchedule schedule_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  torch::Device device_{torch::kCPU};
  int64_t rank_ = 0;
};

}  // namespace lt
