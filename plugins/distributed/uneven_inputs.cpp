#include <lightning_cpp/plugins/distributed/uneven_inputs.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/distributed_sampler.h>

namespace lt {

bool shard_dataloader(DataLoader& loader, Stage stage, UnevenInputs uneven_inputs, int64_t rank, int64_t world_size,
                      const std::string& who) {
  if (loader.is_stream()) {
    loader.set_stream_shard(StreamShard{rank, world_size});
    return true;
  }
  if (const auto& batch_sampler = loader.batch_sampler()) {
    if (auto mine = batch_sampler->sharded(rank, world_size)) {
      loader.set_batch_sampler(std::move(mine));
      return true;
    }
    rank_zero_warn(who, ": the ", stage_name(stage),
                   " loader has a custom batch sampler; it is used as is, so it must give each rank its own shard");
    return false;
  }
  const Sampler* current = loader.sampler().get();
  const bool replaceable = dynamic_cast<const SequentialSampler*>(current) != nullptr ||
                           dynamic_cast<const RandomSampler*>(current) != nullptr ||
                           dynamic_cast<const DistributedSampler*>(current) != nullptr;
  if (!replaceable) {
    rank_zero_warn(who, ": the ", stage_name(stage),
                   " loader has a custom sampler; it is used as is, so it must give each rank its own shard");
    return false;
  }
  const int64_t n = loader.dataset()->size();
  auto sampler_options = DistributedSamplerOptions(world_size, rank)
                             .shuffle(loader.options().shuffle())
                             .seed(loader.options().seed())
                             .drop_last(false)
                             .pad(stage == Stage::kTrain && uneven_inputs == UnevenInputs::kPad);
  loader.set_sampler(std::make_shared<DistributedSampler>(n, sampler_options));
  return true;
}

void balance_training_loader(DataLoader& loader, UnevenInputs uneven_inputs, Strategy& strategy,
                             const FractionOrCount& limit_train_batches) {
  if (loader.size() == DataLoader::kUnknownSize && uneven_inputs != UnevenInputs::kJoin) {
    throw ValueError(c10::str("uneven_inputs: ", uneven_inputs == UnevenInputs::kPad ? "pad" : "error",
                              " needs every rank's number of training batches before training, and this rank's ",
                              "training data is a stream of unknown length; give it one (IterableDataset::length) ",
                              "or use uneven_inputs: join"));
  }
  if (uneven_inputs == UnevenInputs::kError) {
    const std::string listing = uneven_counts(strategy, limit_train_batches.apply(loader.size()));
    LT_CHECK_VALUE(listing.empty(),
                   "uneven_inputs: error: the ranks would run different numbers of training batches per epoch (",
                   listing, "); use uneven_inputs: pad (repeat samples so that every rank has as many batches) or ",
                   "join, or give every rank as many batches");
  } else if (uneven_inputs == UnevenInputs::kPad) {
    // Whole loaders are evened out, so that a fraction limit_train_batches
    // takes the same share of each.
    const int64_t longest = count_range(strategy, loader.size()).second;
    LT_CHECK_VALUE(loader.size() == longest || !loader.is_stream(), "uneven_inputs: pad: this rank's training stream ",
                   "has ", loader.size(), " batches and the longest rank's ", longest, ", and a stream's samples ",
                   "cannot be repeated; use uneven_inputs: join");
    if (loader.size() < longest && loader.batch_sampler()) {
      loader.set_batch_sampler(std::make_shared<PaddedBatchSampler>(loader.batch_sampler(), longest));
    } else if (loader.size() < longest) {
      loader.set_sampler(std::make_shared<PaddedSampler>(loader.sampler(), longest * loader.options().batch_size()));
    }
  }
}

}  // namespace lt
