#include <lightning_cpp/loops/prediction_loop.h>

namespace lt {

std::vector<torch::Tensor> PredictionLoop::run(LoopContext& ctx, DataLoader& loader, int64_t max_batches) {
  ctx.state.stage = Stage::kPredict;
  ctx.module.eval();
  torch::NoGradGuard no_grad;
  ctx.hooks.call(&Callback::on_predict_start);
  std::vector<torch::Tensor> out;
  const int64_t n = std::min(max_batches, loader.size());
  for (int64_t i = 0; i < n; ++i) {
    Batch batch = loader.get(i);
    batch = ctx.strategy.batch_to_device(std::move(batch));
    out.push_back(ctx.module.predict_step(batch, i));
  }
  ctx.hooks.call(&Callback::on_predict_end);
  return out;
}

}  // namespace lt
