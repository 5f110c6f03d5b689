#pragma once
// Which of an epoch's samples a run has trained, so that a run resumed on
// another world size trains the rest of that epoch, every sample once.
//
// A mid-epoch training checkpoint records, where the run's training loader
// is map-style data whose samples the run deals out (its sampler sequential,
// random or the strategy's DistributedSampler, padded or not):
//   "epoch_samples": {"dataset_size": n,
//                     "trained": uint8[n] (1: trained this epoch, by any rank),
//                     "dealt": uint8[n] (where the epoch was dealt after a
//                              resume: what was trained before it)}
// beside the "world_size" every checkpoint holds (core/training_state.h).
// Over a stream whose length() gives each of the epoch's streams' counts:
//   "epoch_samples": {"stream_layout": int64[2] (num_replicas, num_workers of
//                                      the epoch's streams),
//                     "rest": int64[pieces, 3] (stream, begin, end: what is
//                             left of them, in order),
//                     "dealt": int64[pieces, 3] (where dealt after a resume)}
// The epoch's order is fixed by the loader's seed and the epoch, but under
// Join the ranks consumed different numbers of batches, and the shards change
// with W: so the record is the samples themselves, every rank's, reduced.
//
// A run that resumes from it with the same world size goes on as before
// (bitwise the run that was not stopped). With another world size W', the
// samples not trained, in the epoch's order (the loader's permutation for
// the epoch when it shuffles), are dealt to the W' ranks, rank r taking every
// W'-th from the r-th (a RemainderSampler); the ranks' counts may differ by
// one, which lockstep Join takes (uneven_inputs: pad repeats samples so they
// do not; error refuses them); the next epochs are sharded as always. The
// per-rank batch size and accumulate_grad_batches stay as configured, so the
// global batch changes with W; a warning says from what to what.
// With a LengthBucketBatchSampler the rest, in the epoch's order, is
// bucketed as the sampler buckets an epoch (a RemainderBatchSampler). A
// stream's rest is dealt in contiguous slices (a StreamRemainder). Resumed on
// the world size that wrote it, an epoch dealt after a resume goes on in the
// rest as it was dealt ("dealt"), where it stopped: bitwise.
// Refused on a world-size change, naming why: a stream without length(), a batch sampler or
// sampler of the user's (per-rank data: use_distributed_sampler false, or a
// custom one), padded batch samplers (uneven_inputs: pad), another dataset size.

#include <optional>
#include <string>

#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/types.h>
#include <lightning_cpp/data/data_loader.h>

namespace lt {

// The checkpoint's "epoch_samples" for a mid-epoch training checkpoint of
// `loader`, or nothing (no epoch under way, or data it cannot record: a
// stream, a batch sampler, a sampler of the user's). A collective where it
// records (a reduce): every rank calls it at the same point.
std::optional<StateDict> epoch_samples_state(const DataLoader& loader, const RunState& state, Strategy& strategy);

// After a checkpoint (`ckpt`, read from `path`) was restored into `state`:
// where it was written mid-epoch by another world size, gives `loader` the
// rest of that epoch (a RemainderSampler) and starts the epoch from its
// first batch (state.resume_iteration = 0). Throws lt::ValueError naming
// `path` where the rest cannot be dealt out.
void resume_epoch_samples(DataLoader& loader, const StateDict& ckpt, const std::string& path, RunState& state,
                          Strategy& strategy, int64_t accumulate_grad_batches);

}  // namespace lt
