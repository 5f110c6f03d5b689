#include <lightning_cpp/plugins/precision/precision.h>

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// torch.autocast("cpu", dtype=torch.bfloat16) or ("cuda", dtype=torch.float16)
// as a scope; nests, and puts back what was there before.
class Autocast : public ForwardContext {
 public:
  explicit Autocast(c10::DeviceType device) : cpu_(device == c10::kCPU), was_enabled_(enabled()), was_dtype_(dtype()) {
    if (cpu_) {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    } else {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(at::kHalf);
    }
    at::autocast::increment_nesting();
  }
  ~Autocast() override {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    if (cpu_) {
      at::autocast::set_cpu_enabled(was_enabled_);
      at::autocast::set_autocast_cpu_dtype(was_dtype_);
    } else {
      at::autocast::set_enabled(was_enabled_);
      at::autocast::set_autocast_gpu_dtype(was_dtype_);
    }
  }

 private:
  bool enabled() const { return cpu_ ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled(); }
  at::ScalarType dtype() const {
    return cpu_ ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
  }
  bool cpu_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

}  // namespace

std::shared_ptr<Precision> make_precision(const std::string& name, c10::DeviceType device) {
  if (name == "32-true") return std::make_shared<FullPrecision>();
  if (name == "64-true") return std::make_shared<DoublePrecision>();
  if (name == "bf16-mixed") {
    LT_CHECK_VALUE(device == c10::kCPU, "trainer.precision bf16-mixed runs on the CPU here (CPU autocast); on ",
                   c10::DeviceTypeName(device), " it is not built yet");
    return std::make_shared<BF16MixedPrecision>();
  }
  if (name == "16-mixed") {
    LT_CHECK_VALUE(device == c10::kCUDA && torch::cuda::is_available(), "trainer.precision 16-mixed needs CUDA ",
                   "(float16 autocast with a gradient scaler), and ",
                   device == c10::kCUDA ? "this LibTorch or machine has none" : "the run is not on CUDA",
                   "; use bf16-mixed on the CPU");
    return std::make_shared<MixedPrecision>();
  }
  throw ValueError(c10::str("trainer.precision must be one of 32-true, 64-true, bf16-mixed, 16-mixed; got '", name,
                            "'"));
}

void DoublePrecision::convert_module(torch::nn::Module& module) const { module.to(torch::kFloat64); }

Batch DoublePrecision::convert_input(Batch batch) const {
  return batch.map([](const torch::Tensor& t) { return t.is_floating_point() ? t.to(torch::kFloat64) : t; });
}

std::unique_ptr<ForwardContext> BF16MixedPrecision::forward_context() const {
  return std::make_unique<Autocast>(c10::kCPU);
}

std::unique_ptr<ForwardContext> MixedPrecision::forward_context() const {
  return std::make_unique<Autocast>(c10::kCUDA);
}

}  // namespace lt
