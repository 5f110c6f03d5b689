#pragma once
// Precision (Lightning's precision plugin), owned by the strategy: how the
// module and its inputs are converted, what surrounds every forward
// (training, validation, test and predict steps), and what it does around
// backward and the optimizer step (16-mixed: a gradient scaler). Backward and
// the optimizer step run outside the forward's context, on the module's own
// dtype, as with torch.autocast. Implementations: plugins/precision/precision.h.

#include <functional>
#include <memory>
#include <string>

#include <lightning_cpp/core/batch.h>
#include <lightning_cpp/core/types.h>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace lt {

// Held for the duration of one forward.
class ForwardContext {
 public:
  virtual ~ForwardContext() = default;
};

class Precision {
 public:
  virtual ~Precision() = default;
  // Lightning's name: "32-true", "64-true", "bf16-mixed", "16-mixed".
  virtual std::string name() const = 0;
  // Once, before the strategy sets the module up (64-true: to float64).
  virtual void convert_module(torch::nn::Module& /*module*/) const {}
  // Every batch, after it is on the device (64-true: floating tensors to float64).
  virtual Batch convert_input(Batch batch) const { return batch; }
  // Around every forward; null: nothing to do (32-true).
  virtual std::unique_ptr<ForwardContext> forward_context() const { return nullptr; }

  // -- around backward and the optimizer step (the loops and manual optimization call these) --
  // What backward runs on (16-mixed: the loss times the scale).
  virtual torch::Tensor pre_backward(const torch::Tensor& loss) { return loss; }
  // Before the optimizer-step hooks and gradient clipping: the gradients of
  // `optimizer`'s parameters at their true values (16-mixed: unscaled).
  // Returns whether the optimizer steps (16-mixed: not when a gradient is not
  // finite, which a scaler expects now and then).
  virtual bool unscale_gradients(torch::optim::Optimizer& /*optimizer*/) { return true; }
  // After each optimizer step, taken or skipped (16-mixed: the scale's update).
  virtual void after_optimizer_step() {}
  // Whether unscale_gradients judges the gradients' finiteness itself (then
  // trainer.on_nonfinite looks at the losses only).
  virtual bool judges_gradients() const { return false; }
  // A sharding strategy, whose ranks hold different gradients, gives the
  // precision the reduction that makes unscale_gradients' verdict every
  // rank's: `reduce` takes a flag (a one-element tensor, 1: found a
  // non-finite gradient) and returns the maximum over the ranks. Null: none.
  virtual void set_found_inf_reduction(std::function<torch::Tensor(const torch::Tensor&)> /*reduce*/) {}
  // What a checkpoint keeps of it, under state_key(); empty: nothing.
  virtual std::string state_key() const { return "precision"; }
  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}
};

// 32-true: the module as it is.
class FullPrecision : public Precision {
 public:
  std::string name() const override { return "32-true"; }
};

}  // namespace lt
