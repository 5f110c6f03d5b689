#pragma once
// Precision (Lightning's precision plugin), owned by the strategy: how the
// module and its inputs are converted, and what surrounds every forward
// (training, validation, test and predict steps). Backward and the optimizer
// step run outside that context, on the module's own dtype, as with
// torch.autocast. Implementations: plugins/precision/precision.h.

#include <memory>
#include <string>

#include <lightning_cpp/core/batch.h>

namespace torch::nn {
class Module;
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
};

// 32-true: the module as it is.
class FullPrecision : public Precision {
 public:
  std::string name() const override { return "32-true"; }
};

}  // namespace lt
