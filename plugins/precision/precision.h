#pragma once
// The precisions a run can ask for (TrainerOptions::precision, YAML
// trainer.precision), as Lightning names them:
//   32-true     float32 everywhere (the default)
//   64-true     the module and floating inputs in float64
//   bf16-true   the module and floating inputs in bfloat16 (parameters,
//               gradients and the optimizer's state too)
//   16-true     the same in float16
//   bf16-mixed  forward under autocast to bfloat16 on the module's device
//               (matmuls, convolutions, linear layers in bfloat16; reductions
//               and losses in float32); parameters, gradients and the
//               optimizer stay float32
//   16-mixed    CUDA autocast to float16 around every forward, and a gradient
//               scaler (grad_scaler.h) around backward and the optimizer step;
//               refused without CUDA

#include <memory>
#include <string>

#include <c10/core/DeviceType.h>

#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/core/precision.h>
#include <lightning_cpp/plugins/precision/grad_scaler.h>

namespace lt {

// The precision named `name` for modules on `device`; a clear error for an
// unknown name (listing the valid ones) or one the device cannot run.
std::shared_ptr<Precision> make_precision(const std::string& name, c10::DeviceType device);

// 64-true, bf16-true and 16-true (Lightning's DoublePrecision and
// HalfPrecision): the module and the floating inputs in one dtype.
class TruePrecision : public Precision {
 public:
  // float64, bfloat16 or float16.
  explicit TruePrecision(c10::ScalarType dtype);
  std::string name() const override;
  void convert_module(torch::nn::Module& module) const override;
  Batch convert_input(Batch batch) const override;

 private:
  c10::ScalarType dtype_;
};

class DoublePrecision : public TruePrecision {
 public:
  DoublePrecision() : TruePrecision(c10::kDouble) {}
};

// Autocast to bfloat16 on `device` (CPU or CUDA) around every forward.
class BF16MixedPrecision : public Precision {
 public:
  explicit BF16MixedPrecision(c10::DeviceType device = c10::kCPU) : device_(device) {}
  std::string name() const override { return "bf16-mixed"; }
  std::unique_ptr<ForwardContext> forward_context() const override;

 private:
  c10::DeviceType device_;
};

// How fast this CPU multiplies bfloat16 matrices, as a ratio of float32's
// (measured: the best of 3 products of 256x256 matrices each). Without
// native bf16 (x86's avx512_bf16 or amx_bf16) LibTorch's bf16 products run
// far slower (docs/precision.md), so make_precision
// measures it once per process for bf16-mixed and warns with
// bf16_slow_warning's text (empty where ratio >= 1).
double bf16_matmul_speed_ratio();
std::string bf16_slow_warning(double ratio, const CpuInfo& cpu);

// 16-mixed (Lightning's MixedPrecision): make_precision gives it for modules
// on CUDA. Built directly (TrainerOptions::precision_plugin) it also takes the
// scaler's options; a module on the CPU then runs its forward in float32 (CUDA
// autocast casts CUDA tensors only) while the scaler acts as on a GPU, which is
// how the tests check the scaler on a machine without one.
class MixedPrecision : public Precision {
 public:
  explicit MixedPrecision(GradScalerOptions options = {}) : scaler_(options) {}
  std::string name() const override { return "16-mixed"; }
  std::unique_ptr<ForwardContext> forward_context() const override;
  torch::Tensor pre_backward(const torch::Tensor& loss) override { return scaler_.scale(loss); }
  bool unscale_gradients(torch::optim::Optimizer& optimizer) override { return scaler_.unscale(optimizer); }
  void after_optimizer_step() override { scaler_.update(); }
  bool judges_gradients() const override { return true; }
  void set_found_inf_reduction(std::function<torch::Tensor(const torch::Tensor&)> reduce) override {
    scaler_.set_found_inf_reduction(std::move(reduce));
  }
  // Lightning's key for it: its class name.
  std::string state_key() const override { return "MixedPrecision"; }
  StateDict state_dict() const override { return scaler_.state_dict(); }
  void load_state_dict(const StateDict& state) override { scaler_.load_state_dict(state); }
  const GradScaler& scaler() const { return scaler_; }

 private:
  GradScaler scaler_;
};

}  // namespace lt
