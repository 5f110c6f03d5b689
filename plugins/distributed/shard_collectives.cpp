#include <lightning_cpp/plugins/distributed/shard_collectives.h>

#include <vector>

#include <lightning_cpp/core/check.h>

namespace lt {

ShardCollectives::ShardCollectives(c10::intrusive_ptr<c10d::ProcessGroup> group)
    : group_(std::move(group)),
      rank_(group_->getRank()),
      world_size_(group_->getSize()),
      native_(group_->getBackendName() == "nccl") {}

void ShardCollectives::all_gather(const torch::Tensor& shard, torch::Tensor& flat) const {
  start_all_gather(shard, flat)->wait();
}

c10::intrusive_ptr<c10d::Work> ShardCollectives::start_all_gather(const torch::Tensor& shard,
                                                                  torch::Tensor& flat) const {
  const int64_t s = shard.numel();
  LT_INTERNAL_ASSERT(flat.numel() == s * world_size_ && flat.is_contiguous() && shard.is_contiguous(),
                     "ShardCollectives::all_gather: a flat buffer of ", flat.numel(), " elements for shards of ", s,
                     " on ", world_size_, " ranks");
  if (native_) {
    torch::Tensor in = shard;
    return group_->_allgather_base(flat, in);
  }
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int64_t r = 0; r < world_size_; ++r) out[0].push_back(flat.narrow(0, r * s, s));
  std::vector<torch::Tensor> in{shard};
  return group_->allgather(out, in);
}

void ShardCollectives::reduce_scatter(torch::Tensor& flat, torch::Tensor& shard) const {
  const int64_t s = shard.numel();
  LT_INTERNAL_ASSERT(flat.numel() == s * world_size_ && flat.is_contiguous() && shard.is_contiguous(),
                     "ShardCollectives::reduce_scatter: a flat buffer of ", flat.numel(), " elements for shards of ",
                     s, " on ", world_size_, " ranks");
  if (native_) {
    group_->_reduce_scatter_base(shard, flat)->wait();
    return;
  }
  std::vector<torch::Tensor> t{flat};
  group_->allreduce(t)->wait();
  shard.copy_(flat.narrow(0, rank_ * s, s));
}

ShardCollectives::Gathering ShardCollectives::start_gather(const torch::Tensor& shard, int64_t root) const {
  const int64_t s = shard.numel();
  LT_INTERNAL_ASSERT(shard.is_contiguous(), "ShardCollectives::gather: a shard that is not contiguous");
  Gathering gathering;
  std::vector<std::vector<torch::Tensor>> out;
  if (rank_ == root) {
    gathering.flat = torch::empty({world_size_ * s}, shard.options());
    out.emplace_back();
    for (int64_t r = 0; r < world_size_; ++r) out[0].push_back(gathering.flat.narrow(0, r * s, s));
  }
  std::vector<torch::Tensor> in{shard};
  c10d::GatherOptions options;
  options.rootRank = root;
  gathering.work = group_->gather(out, in, options);
  return gathering;
}

}  // namespace lt
