#pragma once
// The precisions a run can ask for (TrainerOptions::precision, YAML
// trainer.precision), as Lightning names them:
//   32-true     float32 everywhere (the default)
//   64-true     the module and floating inputs in float64
//   bf16-mixed  forward under CPU autocast to bfloat16 (matmuls, convolutions,
//               linear layers in bfloat16; reductions and losses in float32);
//               parameters, gradients and the optimizer stay float32
//   16-mixed    CUDA autocast to float16 with a gradient scaler: refused on a
//               machine without CUDA, and not yet built (no CUDA here to test it)

#include <memory>
#include <string>

#include <c10/core/DeviceType.h>

#include <lightning_cpp/core/precision.h>

namespace lt {

// The precision named `name` for modules on `device`; a clear error for an
// unknown name (listing the valid ones) or one the device cannot run.
std::shared_ptr<Precision> make_precision(const std::string& name, c10::DeviceType device);

class DoublePrecision : public Precision {
 public:
  std::string name() const override { return "64-true"; }
  void convert_module(torch::nn::Module& module) const override;
  Batch convert_input(Batch batch) const override;
};

class BF16MixedPrecision : public Precision {
 public:
  std::string name() const override { return "bf16-mixed"; }
  std::unique_ptr<ForwardContext> forward_context() const override;
};

}  // namespace lt
