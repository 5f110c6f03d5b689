#include <lightning_cpp/loops/optimization/manual.h>

namespace lt {

torch::Tensor ManualOptimization::run(LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool /*window_end*/) {
  ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".training_step");
  // Manual optimization calls manual_backward inside training_step: the
  // forward context (autocast) covers it there, as torch.autocast would in Python.
  const auto forward = ctx.strategy.precision().forward_context();
  torch::Tensor out = ctx.strategy.training_step(ctx.module, batch, batch_idx);
  return out.defined() ? out.detach() : out;
}

}  // namespace lt
