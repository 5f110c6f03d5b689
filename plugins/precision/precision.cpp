#include <lightning_cpp/plugins/precision/precision.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>

#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/torch_compat.h>

namespace lt {

namespace {

// torch.autocast(device, dtype) as a scope; nests, and puts back what was
// there before.
class Autocast : public ForwardContext {
 public:
  Autocast(c10::DeviceType device, at::ScalarType dtype)
      : device_(device == c10::kCPU ? c10::kCPU : c10::kCUDA),
        was_enabled_(compat::autocast_enabled(device_)),
        was_dtype_(compat::autocast_dtype(device_)) {
    compat::set_autocast_enabled(device_, true);
    compat::set_autocast_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() override {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast_enabled(device_, was_enabled_);
    compat::set_autocast_dtype(device_, was_dtype_);
  }

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

}  // namespace

std::shared_ptr<Precision> make_precision(const std::string& name, c10::DeviceType device) {
  if (name == "32-true") return std::make_shared<FullPrecision>();
  if (name == "64-true") return std::make_shared<DoublePrecision>();
  if (name == "bf16-true") return std::make_shared<TruePrecision>(c10::kBFloat16);
  if (name == "16-true") return std::make_shared<TruePrecision>(c10::kHalf);
  if (name == "bf16-mixed") {
    LT_CHECK_VALUE(device == c10::kCPU || device == c10::kCUDA, "trainer.precision bf16-mixed runs under CPU or ",
                   "CUDA autocast; the run is on ", c10::DeviceTypeName(device));
    if (device == c10::kCUDA) return std::make_shared<BF16MixedPrecision>(c10::kCUDA);
    static std::once_flag measured;
    std::call_once(measured, [] {
      if (const std::string warning = bf16_slow_warning(bf16_matmul_speed_ratio(), cpu_info()); !warning.empty()) {
        rank_zero_warn(warning);
      }
    });
    return std::make_shared<BF16MixedPrecision>();
  }
  if (name == "16-mixed") {
    LT_CHECK_VALUE(device == c10::kCUDA && torch::cuda::is_available(), "trainer.precision 16-mixed needs CUDA ",
                   "(float16 autocast with a gradient scaler), and ",
                   device == c10::kCUDA ? "this LibTorch or machine has none" : "the run is not on CUDA",
                   "; use bf16-mixed on the CPU");
    return std::make_shared<MixedPrecision>();
  }
  throw ValueError(c10::str("trainer.precision must be one of 32-true, 64-true, bf16-true, 16-true, bf16-mixed, ",
                            "16-mixed; got '", name, "'"));
}

double bf16_matmul_speed_ratio() {
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::rand({256, 256}), b = torch::rand({256, 256});
  auto best_of_3 = [](const torch::Tensor& x, const torch::Tensor& y) {
    (void)torch::mm(x, y);  // warm-up: first-call dispatch and allocations
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      (void)torch::mm(x, y);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  const double f32 = best_of_3(a, b);
  const double bf16 = best_of_3(a.to(torch::kBFloat16), b.to(torch::kBFloat16));
  return f32 / bf16;
}

std::string bf16_slow_warning(double ratio, const CpuInfo& cpu) {
  if (ratio >= 1.0) return "";
  std::string units = "native bf16";
  if (cpu.known()) units = cpu.has("avx512_bf16") || cpu.has("amx_bf16") ? "avx512_bf16 or amx_bf16 (it has one, yet "
                                                                            "LibTorch does not use it fast)"
                                                                          : "avx512_bf16 or amx_bf16";
  char measured[32];
  std::snprintf(measured, sizeof measured, "%.2fx", ratio);
  return c10::str("precision bf16-mixed: this CPU (", cpu.model, ") multiplies bfloat16 matrices at ", measured,
                  " the speed of float32 (measured now), so training runs slower than with 32-true, not faster; ",
                  "it lacks ", units, ". Use precision 32-true here, or bf16-mixed on a CPU with avx512_bf16 or ",
                  "amx_bf16 (Intel Cooper Lake, Sapphire Rapids, AMD Zen 4 and later)");
}

TruePrecision::TruePrecision(c10::ScalarType dtype) : dtype_(dtype) {
  LT_CHECK_VALUE(dtype == c10::kDouble || dtype == c10::kBFloat16 || dtype == c10::kHalf,
                 "TruePrecision: float64, bfloat16 or float16, got ", c10::toString(dtype));
}

std::string TruePrecision::name() const {
  return dtype_ == c10::kDouble ? "64-true" : dtype_ == c10::kBFloat16 ? "bf16-true" : "16-true";
}

void TruePrecision::convert_module(torch::nn::Module& module) const { module.to(dtype_); }

Batch TruePrecision::convert_input(Batch batch) const {
  return batch.map([this](const torch::Tensor& t) { return t.is_floating_point() ? t.to(dtype_) : t; });
}

std::unique_ptr<ForwardContext> BF16MixedPrecision::forward_context() const {
  return std::make_unique<Autocast>(device_, at::kBFloat16);
}

std::unique_ptr<ForwardContext> MixedPrecision::forward_context() const {
  return std::make_unique<Autocast>(c10::kCUDA, at::kHalf);
}

}  // namespace lt
