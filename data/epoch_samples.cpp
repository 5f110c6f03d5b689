#include <lightning_cpp/data/epoch_samples.h>

#include <algorithm>
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
  if (loader.is_stream()) {
    if (loader.stream_shard().num_replicas != world_size) {
      return "each rank reads its own stream as given (use_distributed_sampler: false)";
    }
    for (int64_t w = 0; w < std::max<int64_t>(1, loader.options().num_workers()); ++w) {
      if (!loader.stream_length(w)) return "its training data is a stream of unknown length (IterableDataset::length)";
    }
    return "";
  }
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

using Piece = StreamRemainder::Piece;

torch::Tensor pieces_tensor(const std::vector<Piece>& pieces) {
  torch::Tensor out = torch::empty({static_cast<int64_t>(pieces.size()), 3}, torch::kLong);
  auto rows = out.accessor<int64_t, 2>();
  for (size_t i = 0; i < pieces.size(); ++i) {
    rows[static_cast<int64_t>(i)][0] = pieces[i].stream;
    rows[static_cast<int64_t>(i)][1] = pieces[i].begin;
    rows[static_cast<int64_t>(i)][2] = pieces[i].end;
  }
  return out;
}

// How many examples of each of this rank's `lengths.size()` worker streams
// the epoch's first `batches` batches took: the loader takes a batch from the
// streams in turn, a stream leaving the turn after its last batch (then it
// counts whole: with drop_last its tail is dropped, not left).
std::vector<int64_t> examples_taken(const std::vector<int64_t>& lengths, int64_t b, bool drop_last, int64_t batches) {
  const size_t k = lengths.size();
  std::vector<int64_t> taken(k, 0);
  std::vector<size_t> live;
  for (size_t w = 0; w < k; ++w) {
    if (batch_count(lengths[w], b, drop_last) > 0) live.push_back(w);
  }
  size_t cursor = 0;
  for (int64_t i = 0; i < batches && !live.empty(); ++i) {
    const size_t w = live[cursor];
    if (++taken[w] == batch_count(lengths[w], b, drop_last)) {
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(cursor));
    } else {
      ++cursor;
    }
    if (cursor >= live.size()) cursor = 0;
  }
  for (size_t w = 0; w < k; ++w) {
    taken[w] = taken[w] == batch_count(lengths[w], b, drop_last) ? lengths[w] : taken[w] * b;
  }
  return taken;
}

// A stream's record: the epoch's streams' layout (num_replicas, num_workers)
// and what is left of them ("rest": pieces, one [stream, begin, end] a row);
// where this epoch was dealt after a resume, the pieces it was dealt ("dealt").
StateDict stream_state(const DataLoader& loader, const RunState& state, Strategy& strategy) {
  const int64_t world = strategy.world_size(), workers = std::max<int64_t>(1, loader.options().num_workers());
  const auto& rest = loader.stream_remainder();
  const bool dealt = rest != nullptr && rest->epoch() == state.current_epoch;
  // Every rank's streams, rank-major (as StreamShard::index()), and the pieces each reads.
  std::vector<std::vector<Piece>> reads;
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t w = 0; w < workers; ++w) {
      const StreamShard shard{r, world, w, workers};
      if (dealt) {
        reads.push_back(rest->slice(shard));
      } else {
        const std::optional<int64_t> length = loader.stream_dataset()->length(shard);
        LT_CHECK_VALUE(length.has_value(), "IterableDataset::length gives no length for rank ", r, "'s stream (worker ",
                       w, ") but gives one for this rank's");
        reads.push_back({Piece{shard.index(), 0, *length}});
      }
    }
  }
  // This rank's streams' examples taken (their lengths: what the pieces they read hold), every rank's summed.
  std::vector<int64_t> lengths;
  for (int64_t w = 0; w < workers; ++w) {
    int64_t length = 0;
    for (const Piece& piece : reads[static_cast<size_t>(strategy.global_rank() * workers + w)]) {
      length += piece.end - piece.begin;
    }
    lengths.push_back(length);
  }
  const std::vector<int64_t> mine = examples_taken(lengths, loader.options().batch_size(), loader.options().drop_last(),
                                                   std::min(state.epoch_iteration, state.num_training_batches));
  torch::Tensor taken = torch::zeros({world * workers}, torch::kLong);
  for (int64_t w = 0; w < workers; ++w) taken[strategy.global_rank() * workers + w] = mine[static_cast<size_t>(w)];
  taken = strategy.reduce(taken, ReduceOp::kSum);
  std::vector<Piece> left;
  for (size_t i = 0; i < reads.size(); ++i) {
    int64_t skip = taken[static_cast<int64_t>(i)].item<int64_t>();
    for (const Piece& piece : reads[i]) {
      const int64_t begin = piece.begin + std::min(skip, piece.end - piece.begin);
      skip -= begin - piece.begin;
      if (begin < piece.end) left.push_back({piece.stream, begin, piece.end});
    }
  }
  const StreamShard layout = dealt ? rest->layout() : StreamShard{0, world, 0, workers};
  StateDict out = new_state_dict();
  out.insert("stream_layout", torch::tensor({layout.num_replicas, layout.num_workers}, torch::kLong));
  out.insert("rest", pieces_tensor(left));
  if (dealt) out.insert("dealt", pieces_tensor(rest->pieces()));
  return out;
}

// Reads a [pieces, 3] int64 tensor of `record`'s `key`.
std::vector<Piece> pieces_of(const StateDict& record, const char* key, const std::string& path) {
  const bool well_formed = record.contains(key) && record.at(key).isTensor() &&
                           record.at(key).toTensor().dim() == 2 && record.at(key).toTensor().size(1) == 3;
  LT_CHECK_VALUE(well_formed, "checkpoint '", path, "': epoch_samples.", key,
                 " must be a tensor of pieces, one [stream, begin, end] a row");
  const torch::Tensor tensor = record.at(key).toTensor().to(torch::kLong).contiguous();
  const auto rows = tensor.accessor<int64_t, 2>();
  std::vector<Piece> pieces;
  for (int64_t i = 0; i < rows.size(0); ++i) pieces.push_back({rows[i][0], rows[i][1], rows[i][2]});
  return pieces;
}

// Gives a stream `loader` the rest of the checkpoint's epoch (on the same
// world size, the rest that epoch was dealt); says how much is left.
std::string deal_stream(DataLoader& loader, const StateDict& record, const std::string& path, const RunState& state,
                        bool same_world) {
  const bool well_formed = record.contains("stream_layout") && record.at("stream_layout").isTensor() &&
                           record.at("stream_layout").toTensor().numel() == 2;
  LT_CHECK_VALUE(well_formed, "checkpoint '", path,
                 "': epoch_samples.stream_layout must be [num_replicas, num_workers]");
  const torch::Tensor layout = record.at("stream_layout").toTensor().to(torch::kLong).flatten();
  const int64_t replicas = layout[0].item<int64_t>(), workers = layout[1].item<int64_t>();
  LT_CHECK_VALUE(replicas > 0 && workers > 0, "checkpoint '", path, "': epoch_samples.stream_layout must be ",
                 "positive, got [", replicas, ", ", workers, "]");
  std::vector<Piece> pieces = pieces_of(record, same_world ? "dealt" : "rest", path);
  int64_t left = 0;
  for (const Piece& piece : pieces_of(record, "rest", path)) left += piece.end - piece.begin;
  loader.set_stream_remainder(std::make_shared<StreamRemainder>(loader.stream_dataset(), state.current_epoch,
                                                                StreamShard{0, replicas, 0, workers},
                                                                std::move(pieces)));
  return c10::str(left, " examples left of the epoch's ", replicas * workers, " streams (read on from where they ",
                  "stood: IterableDataset::open and ExampleStream::skip)");
}

// Gives map-style `loader` the rest of the checkpoint's epoch (on the same
// world size, the rest that epoch was dealt); says how much is left.
std::string deal_samples(DataLoader& loader, const StateDict& record, const std::string& path, const RunState& state,
                         Strategy& strategy, bool same_world) {
  const char* key = same_world ? "dealt" : "trained";
  const bool well_formed = record.contains("dataset_size") && record.at("dataset_size").isInt() &&
                           record.contains("trained") && record.at("trained").isTensor() && record.contains(key) &&
                           record.at(key).isTensor();
  LT_CHECK_VALUE(well_formed, "checkpoint '", path, "': epoch_samples must be a dict with dataset_size (int) and ",
                 key, " (a tensor)");
  const int64_t n = loader.dataset()->size();
  LT_CHECK_VALUE(record.at("dataset_size").toInt() == n, "checkpoint '", path, "' was written mid-epoch over ",
                 record.at("dataset_size").toInt(), " training samples and this run's training data has ", n,
                 "; resume with the same data");
  // The samples trained before the epoch's rest is dealt from here.
  const torch::Tensor before = record.at(key).toTensor().to(torch::kUInt8).contiguous();
  LT_CHECK_VALUE(before.numel() == n, "checkpoint '", path, "': epoch_samples.", key, " has ", before.numel(),
                 " entries for ", n, " samples");
  const uint8_t* mark = before.data_ptr<uint8_t>();
  const auto bucket = bucketed(loader);
  std::vector<int64_t> remaining;
  for (int64_t i : bucket ? bucket->order(state.current_epoch) : epoch_order(loader, n, state.current_epoch)) {
    if (mark[i] == 0) remaining.push_back(i);
  }
  const int64_t world = strategy.world_size();
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
  const int64_t done = record.at("trained").toTensor().ne(0).sum().item<int64_t>();
  return c10::str(done, " of ", n, " samples were trained, the other ", n - done);
}

}  // namespace

std::optional<StateDict> epoch_samples_state(const DataLoader& loader, const RunState& state, Strategy& strategy) {
  if (state.stage != Stage::kTrain || state.epoch_ended || state.num_training_batches < 0) return std::nullopt;
  if (!not_dealt(loader, strategy.world_size()).empty()) return std::nullopt;
  if (loader.is_stream()) return stream_state(loader, state, strategy);
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
  if (earlier != nullptr) {
    out.insert("dealt", torch::from_blob(const_cast<uint8_t*>(earlier->data()), {n}, torch::kUInt8).clone());
  }
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
  const bool same_world = saved_world == world;
  const c10::IValue samples = ckpt.contains("epoch_samples") ? ckpt.at("epoch_samples") : c10::IValue();
  // The same shards: the epoch goes on where it stopped, in the rest it was
  // dealt where it was dealt after an earlier resume (its record's "dealt").
  const bool dealt = samples.isGenericDict() && samples.toGenericDict().contains("dealt");
  if (same_world && !dealt) return;
  LT_CHECK_VALUE(samples.isGenericDict(), "checkpoint '", path, "' was written mid-epoch by ",
                 count_of(saved_world, "rank"), " and this run has ", world, ", but it records no samples of epoch ",
                 state.current_epoch,
                 " (its run's training data was a stream of unknown length, each rank's own data as given, or had a ",
                 "sampler or batch sampler of its own), so what is left of the epoch is not known; resume on ",
                 count_of(saved_world, "rank"), ", or from a checkpoint of an epoch's end");
  const StateDict record = samples.toGenericDict();
  const std::string why = not_dealt(loader, world);
  LT_CHECK_VALUE(why.empty(), "checkpoint '", path, "' was written mid-epoch by ", count_of(saved_world, "rank"),
                 " and this run has ", world, ", but ", why, ", so the samples left of epoch ", state.current_epoch,
                 " cannot be dealt out again; resume on ", count_of(saved_world, "rank"),
                 ", or from a checkpoint of an epoch's end");
  LT_CHECK_VALUE(loader.is_stream() == record.contains("rest"), "checkpoint '", path, "' records the samples of ",
                 record.contains("rest") ? "a stream" : "map-style data", " and this run's training data is ",
                 loader.is_stream() ? "a stream" : "map-style", "; resume with the same data");
  const std::string left = loader.is_stream() ? deal_stream(loader, record, path, state, same_world)
                                              : deal_samples(loader, record, path, state, strategy, same_world);
  if (same_world) return;  // the position in the dealt rest stands: bitwise the run that was not stopped
  state.resume_iteration = 0;
  const int64_t batch = loader.options().batch_size();
  rank_zero_warn("resumed on ", count_of(world, "rank"), " from a checkpoint of ", count_of(saved_world, "rank"),
                 " written mid-epoch ", state.current_epoch, " ('", path, "'): ", left, " are dealt out to the ",
                 count_of(world, "rank"), "; the global batch is now ", world * batch * accumulate_grad_batches,
                 " samples (it was ", saved_world * batch * accumulate_grad_batches, ": batch_size ", batch,
                 " x accumulate_grad_batches ",
                 accumulate_grad_batches, " per rank, as configured)");
}

}  // namespace lt
