#pragma once
// The two collectives of sharded training over flat buffers, behind one
// interface: all_gather (every rank's shard into one flat buffer, in rank
// order) and reduce_scatter (the ranks' flat buffers summed, each rank
// keeping its own chunk). NCCL has both natively (_allgather_base,
// _reduce_scatter_base); Gloo in LibTorch 1.13 has neither a flat allgather
// nor a reduce_scatter, so they are built from what it has:
//   all_gather     = allgather into the flat buffer's W chunks (views);
//   reduce_scatter = allreduce of the flat buffer, then this rank's chunk
//                    (twice the bytes of a native reduce_scatter; the sum is
//                    the same on every rank).
// gather (every rank's shard into one flat buffer on one rank: a checkpoint's
// unit at a time) is c10d's gather, which both backends have.
// Every rank calls each with buffers of the same size; each waits for its Work.

#include <cstdint>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace lt {

class ShardCollectives {
 public:
  explicit ShardCollectives(c10::intrusive_ptr<c10d::ProcessGroup> group);

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  // Whether the backend has them natively (NCCL); Gloo's are built.
  bool native() const { return native_; }

  // flat[r * s, (r + 1) * s) = rank r's `shard` (s = shard.numel(); flat has W * s elements).
  void all_gather(const torch::Tensor& shard, torch::Tensor& flat) const;
  // The same, started: `flat` holds it once the Work is waited on (both tensors alive until then).
  c10::intrusive_ptr<c10d::Work> start_all_gather(const torch::Tensor& shard, torch::Tensor& flat) const;
  // shard = chunk `rank` of the ranks' `flat`s summed. `flat` is clobbered.
  void reduce_scatter(torch::Tensor& flat, torch::Tensor& shard) const;
  // Started (its Work waited on by the caller; `shard` alive until then):
  // on rank `root` `flat` is a buffer of W * s elements, rank r's `shard` at
  // r * s; on the others it is undefined (they send their shard).
  struct Gathering {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor flat;
  };
  Gathering start_gather(const torch::Tensor& shard, int64_t root) const;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int64_t rank_;
  int64_t world_size_;
  bool native_;
};

}  // namespace lt
