#include <lightning_cpp/plugins/strategies/ddp/sharding.h>

#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/distributed_sampler.h>

namespace lt {

namespace {

// The effective number of batches `rank` runs with `sampler`.
int64_t batches_for_rank(const DistributedSampler& sampler, int64_t rank, const DataLoaderOptions& loader) {
  const int64_t n = sampler.num_samples_for_rank(rank), b = loader.batch_size();
  return loader.drop_last() ? n / b : (n + b - 1) / b;
}

}  // namespace

bool shard_dataloader(DataLoader& loader, Stage stage, UnevenInputs uneven_inputs, const FractionOrCount& limit,
                      int64_t rank, int64_t world_size) {
  const Sampler* current = loader.sampler().get();
  const bool replaceable = dynamic_cast<const SequentialSampler*>(current) != nullptr ||
                           dynamic_cast<const RandomSampler*>(current) != nullptr ||
                           dynamic_cast<const DistributedSampler*>(current) != nullptr;
  if (!replaceable) {
    rank_zero_warn("strategy ddp: the ", stage_name(stage),
                   " loader has a custom sampler; it is used as is, so it must give each rank its own shard");
    return false;
  }
  const int64_t n = loader.dataset()->size();
  auto sampler_options = DistributedSamplerOptions(world_size, rank)
                             .shuffle(loader.options().shuffle())
                             .seed(loader.options().seed())
                             .drop_last(false)
                             .pad(stage == Stage::kTrain && uneven_inputs == UnevenInputs::kPad);
  if (stage == Stage::kValidate || stage == Stage::kTest) {
    // Every rank must run as many evaluation batches as the others, or the
    // sync_dist reductions would not match. Each rank can tell from (n,
    // world size, batch size) alone, so they all decide alike.
    const DistributedSampler probe(n, sampler_options);
    const int64_t first = limit.apply(batches_for_rank(probe, 0, loader.options()));
    bool even = true;
    for (int64_t r = 1; r < world_size; ++r)
      even = even && limit.apply(batches_for_rank(probe, r, loader.options())) == first;
    if (!even) {
      sampler_options.pad(true);
      rank_zero_warn("strategy ddp: ", n, " ", stage_name(stage), " samples in batches of ",
                     loader.options().batch_size(), " would give the ", world_size,
                     " ranks different numbers of batches; padding the shards ", "(a few samples are evaluated twice)");
    }
  }
  loader.set_sampler(std::make_shared<DistributedSampler>(n, sampler_options));
  return true;
}

std::string uneven_counts(Strategy& strategy, int64_t local) {
  const torch::Tensor counts = strategy.all_gather(torch::tensor({local}, torch::kLong)).flatten();
  if ((counts == local).all().item<bool>()) return {};
  std::string listing;
  for (int64_t r = 0; r < counts.size(0); ++r) {
    listing += c10::str(r == 0 ? "" : ", ", "rank ", r, ": ", counts[r].item<int64_t>());
  }
  return listing;
}

}  // namespace lt
