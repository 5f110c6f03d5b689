#pragma once
// How the DDP strategy shards a run's data across ranks.
//
// The training loader's sampler becomes a DistributedSampler (shuffle and seed
// from the loader) whose padding follows uneven_inputs: kPad pads as PyTorch
// does; kJoin and kError shard without padding (uneven; Join keeps the
// collectives matched, or the strategy refuses uneven shards before training).
// Evaluation loaders are sharded without padding, unless that would give
// ranks different batch counts (then padded: a few samples count twice), so
// that sync_dist logging issues the same collectives on every rank. A loader
// with a custom sampler is used as is (a warning says it must shard itself).

#include <cstdint>
#include <string>

#include <lightning_cpp/core/types.h>

namespace lt {

class DataLoader;
class Strategy;

// What the DDP strategy does when ranks would get different numbers of batches.
enum class UnevenInputs {
  kJoin,   // no padding; Join keeps the collectives matched (see plugins/join)
  kPad,    // PyTorch DistributedSampler padding: repeat samples so shards are even
  kError,  // refuse before training if shard sizes differ
};

// Replaces `loader`'s sampler with rank `rank`'s share of `world_size`; false when
// the loader has a custom sampler, which is kept.
// `limit` is the stage's limit_*_batches (evaluation: the batch counts compared).
bool shard_dataloader(DataLoader& loader, Stage stage, UnevenInputs uneven_inputs, const FractionOrCount& limit,
                      int64_t rank, int64_t world_size);

// Gathers every rank's `local` count (a collective): "" when all are equal,
// else the counts, "rank 0: 3, rank 1: 5".
std::string uneven_counts(Strategy& strategy, int64_t local);

}  // namespace lt
