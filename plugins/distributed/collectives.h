#pragma once
// The collectives of one process group as a parallel strategy (or a user's own
// loop) issues them: each marked in the collective watchdog for the failure
// report, each waited for before it returns, on tensors copied to the
// group's device and returned on the caller's.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

class CollectiveWatchdog;

struct WatchedCollectives {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  torch::Device device{torch::kCPU};
  CollectiveWatchdog* watchdog = nullptr;  // null: unwatched (one rank)
  // Named in errors ("strategy ddp").
  std::string owner;

  torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op) const;
  // Stacks every rank's tensor along a new leading dimension. The shapes are
  // compared first (one allgather): a mismatch is an error on every rank.
  torch::Tensor all_gather(const torch::Tensor& tensor) const;
  // Every rank's bytes, by rank (sizes may differ).
  std::vector<std::string> all_gather_bytes(const std::string& bytes) const;
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src) const;
  void barrier() const;
  // all=true: true iff every rank decided true; all=false: true iff any did.
  bool reduce_boolean_decision(bool decision, bool all) const;
};

}  // namespace lt
