#pragma once
// How a data-parallel strategy shards a run's data across ranks.
//
// The training loader's sampler becomes a DistributedSampler (shuffle and seed
// from the loader) whose padding follows uneven_inputs: kPad pads as PyTorch
// does; kJoin and kError shard without padding (uneven; Join keeps the
// collectives matched, or the strategy refuses uneven shards before training).
// Evaluation and prediction loaders are sharded without padding: every
// sample once, the ranks' batch counts may differ (sync_dist epoch values
// are merged exactly, core/result_collection.h; predictions are gathered in
// dataset order, loops/prediction_loop.h). A batch sampler that shards
// itself (BatchSampler::sharded, e.g. LengthBucketBatchSampler) is given this
// rank's share. A loader with a custom sampler or batch sampler is used as is
// (a warning says it must shard itself), and so is every loader with
// use_distributed_sampler false (per-rank data).
//
// Then, whoever sharded it, the training loader is evened out from the ranks'
// batch counts (balance_training_loader), so that no mode ever leaves ranks
// with different counts to abort in gloo: kError refuses them before
// training, kPad repeats samples on the shorter ranks, kJoin runs them as they are.

#include <cstdint>
#include <string>

#include <lightning_cpp/core/types.h>

namespace lt {

class DataLoader;
class Strategy;

// What a data-parallel strategy does when ranks would get different numbers of batches.
enum class UnevenInputs {
  kJoin,   // no padding; Join keeps the collectives matched (see plugins/join)
  kPad,    // PyTorch DistributedSampler padding: repeat samples so shards are even
  kError,  // refuse before training if shard sizes differ
};

// Replaces `loader`'s sampler with rank `rank`'s share of `world_size`; false when
// the loader has a custom sampler, which is kept.
// `who` ("strategy ddp") begins its warnings.
bool shard_dataloader(DataLoader& loader, Stage stage, UnevenInputs uneven_inputs, int64_t rank, int64_t world_size,
                      const std::string& who);

// Before training (collectives: one allreduce; kError adds an allgather when
// the counts differ): kError throws lt::ValueError
// naming each rank's batch count (after limit_train_batches) when they
// differ; kPad gives a loader with fewer batches than the longest rank's a
// PaddedSampler up to that count; kJoin does nothing.
void balance_training_loader(DataLoader& loader, UnevenInputs uneven_inputs, Strategy& strategy,
                             const FractionOrCount& limit_train_batches);

}  // namespace lt
