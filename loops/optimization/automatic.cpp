#include <lightning_cpp/loops/optimization/automatic.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

void step_scheduler(OptimizerConfig& config, Interval interval, int64_t counter,
                    const std::map<std::string, double>& metrics) {
  if (!config.lr_scheduler || config.interval != interval || counter % config.frequency != 0) return;
  if (!config.lr_scheduler->monitors_metric()) return config.lr_scheduler->step();
  const auto it = metrics.find(config.monitor);
  if (it != metrics.end()) return config.lr_scheduler->step(it->second);
  std::string logged;
  for (const auto& [key, value] : metrics) logged += (logged.empty() ? "" : ", ") + key;
  const std::string message =
      c10::str("the learning-rate scheduler follows '", config.monitor, "', which is not among the logged metrics (",
               logged.empty() ? std::string("none") : logged, ") at this ",
               interval == Interval::kStep ? "step" : "epoch", "'s end; log it, or set the OptimizerConfig's monitor ",
               "to one of them");
  LT_CHECK_VALUE(!config.strict, message);
  rank_zero_warn(message, " (strict false: the scheduler does not step)");
}

torch::Tensor AutomaticOptimization::run(LoopContext& ctx, const Batch& batch, int64_t batch_idx, bool window_end) {
  torch::Tensor loss;
  {
    ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".training_step");
    const auto forward = ctx.strategy.precision().forward_context();
    loss = ctx.strategy.training_step(ctx.module, batch, batch_idx);
  }
  LT_CHECK(loss.defined() && loss.numel() == 1, "training_step must return a scalar loss in automatic optimization",
           " (epoch ", ctx.state.current_epoch, ", batch ", batch_idx, "); got ",
           loss.defined() ? c10::str("shape ", loss.sizes()) : std::string("an undefined tensor"),
           ". Return a loss, or call set_automatic_optimization(false)");
  const int64_t k = ctx.options.accumulate_grad_batches();
  if (ctx.options.on_nonfinite() == NonFinitePolicy::kError) {
    if (batch_idx % k == 0) window_losses_.clear();  // windows start at multiples of k
    window_losses_.emplace_back(batch_idx, loss.detach());
  }
  backward(ctx, k == 1 ? loss : loss / static_cast<double>(k));
  if (window_end) optimizer_step(ctx);
  return loss.detach();
}

void AutomaticOptimization::backward(LoopContext& ctx, const torch::Tensor& scaled_loss) {
  ctx.hooks.call(&Callback::on_before_backward, scaled_loss);
  ctx.module.on_before_backward(scaled_loss);
  {
    ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".backward");
    ctx.strategy.backward(ctx.strategy.precision().pre_backward(scaled_loss), ctx.module);
  }
  ctx.hooks.call(&Callback::on_after_backward);
  ctx.module.on_after_backward();
}

std::optional<std::string> first_nonfinite_gradient(const torch::nn::Module& module,
                                                    torch::optim::Optimizer& optimizer) {
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    const auto& grad = p.value().grad();
    if (grad.defined() && !torch::isfinite(grad).all().item<bool>()) return p.key();
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) return "(the strategy's gradient shard)";
    }
  }
  return std::nullopt;
}

void AutomaticOptimization::optimizer_step(LoopContext& ctx) {
  // A joined rank takes this step too (lockstep Join): its hooks' collectives are matched.
  UnmatchedHooks matched(ctx.state, nullptr);
  auto& optimizer = *ctx.optim->optimizer;
  auto& precision = ctx.strategy.precision();
  // As Lightning: the gradients at their true values before the hooks and clipping see them.
  const bool steps = precision.unscale_gradients(optimizer);
  std::vector<std::pair<int64_t, torch::Tensor>> losses;
  losses.swap(window_losses_);
  std::vector<torch::Tensor> checked;  // the window's losses, and the gradients unless the precision judges them
  for (const auto& entry : losses) checked.push_back(entry.second);
  if (!precision.judges_gradients()) {
    // The optimizer's parameters: a sharding strategy's optimizer steps its shard, not the module's.
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& p : group.params()) {
        if (p.grad().defined()) checked.push_back(p.grad());
      }
    }
  }
  // One host sync; false may also mean a finite sum overflowed: then first_nonfinite_gradient tells.
  if (ctx.options.on_nonfinite() != NonFinitePolicy::kIgnore && !ctx.strategy.all_finite(checked)) {
    for (const auto& [batch_idx, loss] : losses) {
      if (torch::isfinite(loss).all().item<bool>()) continue;
      throw Error(c10::str("non-finite loss ", loss.item<double>(), " at epoch ", ctx.state.current_epoch, ", batch ",
                           batch_idx, ", global step ", ctx.state.global_step,
                           " (trainer.on_nonfinite=error; use skip_step to skip such steps)"));
    }
    // Where ranks hold different gradients (a shard each) every rank learns whether any found one.
    std::optional<std::string> name = first_nonfinite_gradient(ctx.module, optimizer);
    if (ctx.strategy.reduce_boolean_decision(name.has_value(), /*all=*/false)) {
      if (!name) name = "(on another rank's gradient shard)";
      if (ctx.options.on_nonfinite() == NonFinitePolicy::kError) {
        throw Error(c10::str("non-finite gradient in parameter '", *name, "' at epoch ", ctx.state.current_epoch,
                             ", batch ", ctx.state.batch_idx, ", global step ", ctx.state.global_step,
                             " (trainer.on_nonfinite=error; use skip_step to skip such steps)"));
      }
      optimizer.zero_grad();
      if (++ctx.state.skipped_steps == 1) {
        rank_zero_warn("on_nonfinite: skip_step: skipped the optimizer step at epoch ", ctx.state.current_epoch,
                       ", global step ", ctx.state.global_step, " (non-finite gradient in parameter '", *name,
                       "'); the number of skipped steps is reported at the end of fit");
      }
      ++ctx.state.global_step;  // the window is consumed on every rank alike
      return;
    }
  }
  ctx.hooks.call(&Callback::on_before_optimizer_step, optimizer);
  ctx.module.on_before_optimizer_step(optimizer);
  // As Lightning: after backward and the unscaling, before the step.
  ctx.strategy.clip_gradients(optimizer, ctx.options.gradient_clip_val(), ctx.options.gradient_clip_algorithm());
  try {
    ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".optimizer_step");
    if (steps) ctx.strategy.optimizer_step(optimizer);  // skipped: a scaler's non-finite gradients
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Often an option the parameters cannot take (lr 1e39 on float32
    // parameters: "value cannot be converted to type float"): name them.
    std::string lrs;
    for (const auto& group : optimizer.param_groups()) lrs += c10::str(lrs.empty() ? "" : ", ", get_lr(group));
    throw Error(c10::str("the optimizer step failed at epoch ", ctx.state.current_epoch, ", global step ",
                         ctx.state.global_step, " (lr of its parameter groups: ", lrs, "): ",
                         error_message(e)));
  }
  precision.after_optimizer_step();
  ctx.hooks.call(&Callback::on_before_zero_grad, optimizer);
  ctx.module.on_before_zero_grad(optimizer);
  optimizer.zero_grad();
  ++ctx.state.global_step;
  step_scheduler(*ctx.optim, Interval::kStep, ctx.state.global_step, ctx.state.callback_metrics);
}

}  // namespace lt
