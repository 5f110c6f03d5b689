#include <lightning_cpp/loops/evaluation_loop.h>

namespace lt {

std::map<std::string, double> EvaluationLoop::run(LoopContext& ctx, DataLoader& loader, Stage stage,
                                                  int64_t max_batches) {
  const bool test = stage == Stage::kTest;
  const bool sanity = stage == Stage::kSanityCheck;
  const Stage previous_stage = ctx.state.stage;
  ctx.state.stage = stage;
  ctx.state.sanity_checking = sanity;
  const bool was_training = ctx.module.is_training();
  ctx.module.eval();
  torch::NoGradGuard no_grad;
  ctx.strategy.on_evaluation_start();  // a sharding strategy gathers the parameters (every rank)
  ResultCollection& results = ctx.use_results(test ? Stage::kTest : Stage::kValidate, true);
  results.reset_epoch();

  if (test) {
    ctx.hooks.call(&Callback::on_test_start);
    ctx.hooks.call(&Callback::on_test_epoch_start);
    ctx.module.on_test_epoch_start();
  } else {
    ctx.hooks.call(&Callback::on_validation_start);
    ctx.hooks.call(&Callback::on_validation_epoch_start);
    ctx.module.on_validation_epoch_start();
  }
  // A stream of unknown length runs to its end (or max_batches).
  const bool known = loader.size() != DataLoader::kUnknownSize;
  const int64_t n = known ? std::min(max_batches, loader.size()) : max_batches;
  if (ctx.strategy.world_size() > 1) results.set_uneven_batches(uneven_counts(ctx.strategy, known ? n : -1));
  for (int64_t i = 0; i < n && loader.has_batch(i); ++i) {
    Batch batch;
    {
      ProfileScope scope(ctx.profiler, test ? "[_EvaluationLoop].test_next" : "[_EvaluationLoop].val_next");
      batch = loader.get(i);
    }
    batch = ctx.strategy.prepare_batch(std::move(batch));
    results.set_current_batch_size(batch.size());
    if (test) {
      {
        ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".test_step");
        const auto forward = ctx.strategy.precision().forward_context();
        ctx.module.test_step(batch, i);
      }
      ctx.hooks.call(&Callback::on_test_batch_end, batch, i);
    } else {
      ctx.hooks.call(&Callback::on_validation_batch_start, batch, i);
      {
        ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".validation_step");
        const auto forward = ctx.strategy.precision().forward_context();
        ctx.module.validation_step(batch, i);
      }
      ctx.hooks.call(&Callback::on_validation_batch_end, batch, i);
    }
  }
  results.set_stage(test ? Stage::kTest : Stage::kValidate, false);
  if (test) {
    ctx.module.on_test_epoch_end();
  } else {
    ctx.module.on_validation_epoch_end();
  }
  std::map<std::string, double> metrics;
  if (sanity) {
    results.reset_epoch();
  } else {
    metrics = results.take_epoch_metrics(true);
    ctx.log_metrics(metrics);
  }
  if (test) {
    ctx.hooks.call(&Callback::on_test_epoch_end);
    ctx.hooks.call(&Callback::on_test_end);
  } else {
    ctx.hooks.call(&Callback::on_validation_epoch_end);
    ctx.hooks.call(&Callback::on_validation_end);
  }
  ctx.strategy.on_evaluation_end();
  if (was_training) ctx.module.train();
  ctx.state.sanity_checking = false;
  ctx.state.stage = previous_stage;
  if (previous_stage == Stage::kTrain) ctx.use_results(Stage::kTrain, true);
  return metrics;
}

}  // namespace lt
