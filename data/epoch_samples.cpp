#include <lightning_cpp/data/epoch_samples.h>

#include <memory>
#include <numeric>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/data/batch_sampler.h>
#include <lightning_cpp/data/distributed_sampler.h>

namespace lt {

namespace {

// The sampler under a PaddedSampler, if any.
const Sampler* unpadded(const DataLoader& loader) {
  const Sampler* sampler = loader.sampler().get();
  if (const auto* padded = dynamic_cast<const PaddedSampler*>(sampler)) return padded->inner().get();
  return sampler;
}

// The loader's LengthBucketBatchSampler (under the rest of an epoch dealt after a resume), if any.
std::shared_ptr<const LengthBucketBatchSampler> bucketed(const DataLoader& loader) {
  const std::shared_ptr<BatchSampler>& sampler = loader.batch_sampler();
  if (const auto* rest = dynamic_cast<const RemainderBatchSampler*>(sampler.get())) return rest->inner();
  return std::dynamic_pointer_cast<const LengthBucketBatchSampler>(sampler);
}

// Why `loader`'s samples are not the run's to deal out on `world_size`
// ranks, or "" where they are: the strategy's DistributedSampler or
// LengthBucketBatchSampler shards (or the rest of an epoch dealt after a
// resume), or one process's own order.
std::string not_dealt(const DataLoader& loader, int64_t world_size) {
  if (loader.is_stream()) return "its training data is a stream";
  if (const auto bucket = bucketed(loader)) {
    if (bucket->options().num_replicas() == world_size) return "";
    return "each rank trains its own data as given (use_distributed_sampler: false)";
  }
  if (dynamic_cast<const PaddedBatchSampler*>(loader.batch_sampler().get()) != nullptr) {
    return "its batch sampler's batches are repeated (uneven_inputs: pad; join deals them out)";
  }
  if (loader.batch_sampler()) return "its training loader has a batch sampler of its own";
  const Sampler* sampler = unpadded(loader);
  if (dynamic_cast<const DistributedSampler*>(sampler) != nullptr) return "";
  if (dynamic_cast<const RemainderSampler*>(sampler) != nullptr) return "";
  const bool own_order = dynamic_cast<const RandomSampler*>(sampler) != nullptr ||
                         dynamic_cast<const SequentialSampler*>(sampler) != nullptr;
  if (own_order && world_size == 1) return "";
  return own_order ? "each rank trains its own data as given (use_distributed_sampler: false)"
                   : "its training loader has a sampler of its own";
}

// The epoch's samples in its order: the loader's permutation when it shuffles.
std::vector<int64_t> epoch_order(const DataLoader& loader, int64_t n, int64_t epoch) {
  if (loader.options().shuffle()) return seeded_permutation(n, loader.options().seed() + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

}  // namespace

std::optional<StateDict> epoch_samples_state(const DataLoader& loader, const RunState& state, Strategy& strategy) {
  if (state.stage != Stage::kTrain || state.epoch_ended || state.num_training_batches < 0) return std::nullopt;
  if (!not_dealt(loader, strategy.world_size()).empty()) return std::nullopt;
  const int64_t n = loader.dataset()->size();
  torch::Tensor trained = torch::zeros({n}, torch::kFloat);
  float* mark = trained.data_ptr<float>();
  // What the checkpoint this epoch resumed from recorded.
  const std::vector<uint8_t>* earlier = nullptr;
  if (const auto* rest = dynamic_cast<const RemainderSampler*>(unpadded(loader));
      rest != nullptr && rest->epoch() == state.current_epoch) {
    earlier = &rest->trained();
  }
  if (const auto* rest = dynamic_cast<const RemainderBatchSampler*>(loader.batch_sampler().get());
      rest != nullptr && rest->epoch() == state.current_epoch) {
    earlier = &rest->trained();
  }
  for (int64_t i = 0; earlier != nullptr && i < n; ++i) mark[i] = (*earlier)[static_cast<size_t>(i)];
  // Under Join a rank's iterations past its own batches were shadowed.
  const int64_t consumed = std::min(state.epoch_iteration, state.num_training_batches);
  for (int64_t b = 0; b < consumed; ++b) {
    for (int64_t i : loader.batch_indices(b)) mark[i] = 1.0F;
  }
  trained = strategy.reduce(trained, ReduceOp::kMax);
  StateDict out = new_state_dict();
  out.insert("dataset_size", n);
  out.insert("trained", trained.to(torch::kUInt8));
  return out;
}

void resume_epoch_samples(DataLoader& loader, const StateDict& ckpt, const std::string& path, RunState& state,
                          Strategy& strategy, int64_t accumulate_grad_batches) {
  if (!ckpt.contains("epoch_iteration")) return;  // an epoch's end: the next epoch is sharded as always
  const int64_t world = strategy.world_size();
  // Checkpoints from before "world_size": taken as written by as many ranks.
  const c10::IValue saved = ckpt.contains("world_size") ? ckpt.at("world_size") : c10::IValue(world);
  LT_CHECK_VALUE(saved.isInt() && saved.toInt() > 0, "checkpoint '", path, "': world_size must be a positive int");
  const int64_t saved_world = saved.toInt();
  if (saved_world == world) return;  // the same shards: the epoch goes on where it stopped
  LT_CHECK_VALUE(ckpt.contains("epoch_samples"), "checkpoint '", path, "' was written mid-epoch by ", saved_world,
                 " ranks and this run has ", world, ", but it records no samples of epoch ", state.current_epoch,
                 " (its run's training data was a stream, each rank's own data as given, or had a sampler or ",
                 "batch sampler of its own), so what is left of the epoch is not known; resume on ", saved_world,
                 " ranks, or from a checkpoint of an epoch's end");
  const c10::IValue& samples = ckpt.at("epoch_samples");
  const bool well_formed = samples.isGenericDict() && samples.toGenericDict().contains("dataset_size") &&
                           samples.toGenericDict().at("dataset_size").isInt() &&
                           samples.toGenericDict().contains("trained") &&
                           samples.toGenericDict().at("trained").isTensor();
  LT_CHECK_VALUE(well_formed, "checkpoint '", path, "': epoch_samples must be a dict with dataset_size (int) and ",
                 "trained (a tensor)");
  const StateDict record = samples.toGenericDict();
  const std::string why = not_dealt(loader, world);
  LT_CHECK_VALUE(why.empty(), "checkpoint '", path, "' was written mid-epoch by ", saved_world, " ranks and this run has ",
                 world, ", but ", why, ", so the samples left of epoch ", state.current_epoch,
                 " cannot be dealt out again; resume on ", saved_world, " ranks, or from a checkpoint of an epoch's end");
  const int64_t n = loader.dataset()->size();
  LT_CHECK_VALUE(record.at("dataset_size").toInt() == n, "checkpoint '", path, "' was written mid-epoch over ",
                 record.at("dataset_size").toInt(), " training samples and this run's training data has ", n,
                 "; resume with the same data");
  const torch::Tensor trained = record.at("trained").toTensor().to(torch::kUInt8).contiguous();
  LT_CHECK_VALUE(trained.numel() == n, "checkpoint '", path, "': epoch_samples.trained has ", trained.numel(),
                 " entries for ", n, " samples");
  const uint8_t* mark = trained.data_ptr<uint8_t>();
  const auto bucket = bucketed(loader);
  std::vector<int64_t> remaining;
  for (int64_t i : bucket ? bucket->order(state.current_epoch) : epoch_order(loader, n, state.current_epoch)) {
    if (mark[i] == 0) remaining.push_back(i);
  }
  if (bucket) {
    // Bucketed as the sampler buckets an epoch (its batch sizes), of the rest.
    loader.set_batch_sampler(std::make_shared<RemainderBatchSampler>(bucket, state.current_epoch, remaining,
                                                                     std::vector<uint8_t>(mark, mark + n)));
  } else {
    // Padding as the run's sampler pads (uneven_inputs: pad).
    const auto* distributed = dynamic_cast<const DistributedSampler*>(unpadded(loader));
    const bool pad = dynamic_cast<const PaddedSampler*>(loader.sampler().get()) != nullptr ||
                     (distributed != nullptr && distributed->options().pad());
    std::shared_ptr<Sampler> inner = loader.sampler();
    if (const auto* rest = dynamic_cast<const RemainderSampler*>(inner.get())) inner = rest->inner();
    loader.set_sampler(std::make_shared<RemainderSampler>(inner, state.current_epoch, remaining,
                                                          strategy.global_rank(), world, pad,
                                                          std::vector<uint8_t>(mark, mark + n)));
  }
  state.resume_iteration = 0;
  const int64_t batch = loader.options().batch_size();
  rank_zero_warn("resumed on ", world, " ranks from a checkpoint of ", saved_world, " ranks written mid-epoch ",
                 state.current_epoch, " ('", path, "'): ", n - static_cast<int64_t>(remaining.size()), " of ", n,
                 " samples were trained, the other ", remaining.size(), " are dealt out to the ", world,
                 " ranks; the global batch is now ", world * batch * accumulate_grad_batches, " samples (it was ",
                 saved_world * batch * accumulate_grad_batches, ": batch_size ", batch, " x accumulate_grad_batches ",
                 accumulate_grad_batches, " per rank, as configured)");
}

}  // namespace lt
