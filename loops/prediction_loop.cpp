#include <lightning_cpp/loops/prediction_loop.h>

#include <torch/serialize.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

namespace {

// Every rank's predictions with the dataset indices of their samples, in
// dataset order and in batches of the loader's batch size: what one process
// predicting the whole dataset returns.
std::vector<torch::Tensor> gather_in_dataset_order(Strategy& strategy, const DataLoader& loader,
                                                   const std::vector<torch::Tensor>& local) {
  std::vector<int64_t> indices;
  c10::List<torch::Tensor> rows;
  for (int64_t i = 0; i < static_cast<int64_t>(local.size()); ++i) {
    const std::vector<int64_t> batch = loader.batch_indices(i);
    const torch::Tensor& p = local[i];
    LT_CHECK(p.defined() && p.dim() >= 1 && p.size(0) == static_cast<int64_t>(batch.size()), "predict under ",
             strategy.world_size(), " ranks returns every sample once, in dataset order, so predict_step must return "
             "one row per sample: batch ", i, " has ", batch.size(), " samples, predict_step returned ",
             p.defined() ? c10::str("shape ", p.sizes()) : std::string("an undefined tensor"));
    indices.insert(indices.end(), batch.begin(), batch.end());
    rows.push_back(p.detach().cpu());
  }
  const std::vector<char> bytes =
      torch::pickle_save(c10::ivalue::Tuple::create({torch::tensor(indices, torch::kLong), rows}));
  std::vector<torch::Tensor> all_indices;
  std::vector<torch::Tensor> all_rows;
  for (const std::string& rank_bytes : strategy.all_gather_bytes(std::string(bytes.begin(), bytes.end()))) {
    const c10::IValue payload = torch::pickle_load(std::vector<char>(rank_bytes.begin(), rank_bytes.end()));
    const auto& parts = payload.toTupleRef().elements();
    all_indices.push_back(parts[0].toTensor());
    for (const c10::IValue& row : parts[1].toListRef()) all_rows.push_back(row.toTensor());
  }
  const torch::Tensor order_by = torch::cat(all_indices);
  if (all_rows.empty()) return {};
  if (std::get<0>(torch::_unique(order_by)).numel() != order_by.numel()) {
    // A custom sampler (a dataset of each rank's own) indexes each rank's own data: nothing to merge.
    rank_zero_warn("predict: the ranks' prediction loaders index their own data (a custom sampler), so each rank "
                   "returns its own predictions");
    return local;
  }
  torch::Tensor all;
  try {
    all = torch::cat(all_rows);
  } catch (const c10::Error& e) {
    throw Error(c10::str("predict: the ranks' predictions cannot be joined into one tensor (predict_step must "
                         "return the same shape but for the batch dimension, and the same dtype): ",
                         e.what_without_backtrace()));
  }
  return all.index_select(0, std::get<1>(order_by.sort())).split(loader.options().batch_size());
}

}  // namespace

std::vector<torch::Tensor> PredictionLoop::run(LoopContext& ctx, DataLoader& loader, int64_t max_batches) {
  ctx.state.stage = Stage::kPredict;
  ctx.module.eval();
  torch::NoGradGuard no_grad;
  ctx.hooks.call(&Callback::on_predict_start);
  std::vector<torch::Tensor> out;
  const int64_t n = loader.size() == DataLoader::kUnknownSize ? max_batches : std::min(max_batches, loader.size());
  for (int64_t i = 0; i < n && loader.has_batch(i); ++i) {
    Batch batch = loader.get(i);
    batch = ctx.strategy.prepare_batch(std::move(batch));
    const auto forward = ctx.strategy.precision().forward_context();
    out.push_back(ctx.module.predict_step(batch, i));
  }
  // A stream has no dataset order to merge the ranks' predictions in: each rank returns its own.
  if (ctx.strategy.world_size() > 1 && !loader.is_stream()) out = gather_in_dataset_order(ctx.strategy, loader, out);
  ctx.hooks.call(&Callback::on_predict_end);
  return out;
}

}  // namespace lt
