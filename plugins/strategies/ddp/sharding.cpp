#include <lightning_cpp/plugins/strategies/ddp/sharding.h>

#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/distributed_sampler.h>

namespace lt {

bool shard_dataloader(DataLoader& loader, Stage stage, UnevenInputs uneven_inputs, int64_t rank, int64_t world_size) {
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
  loader.set_sampler(std::make_shared<DistributedSampler>(n, sampler_options));
  return true;
}

}  // namespace lt
