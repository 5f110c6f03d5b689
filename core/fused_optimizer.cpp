#include <lightning_cpp/core/fused_optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <typeinfo>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <lightning_cpp/core/optimizer_state.h>

// This file is compiled with -ffp-contract=off (CMakeLists.txt): the compiler
// must not fuse a * b + c on its own, the rounding is chosen here, per ATen.

namespace lt {
namespace {

// How ATen rounds a + alpha * b (add with alpha, addcmul) in this process.
enum class Rounding { kFused, kTwice, kUnmatched };

template <bool kFma>
inline float mul_add(float a, float b, float c) {
  if constexpr (kFma) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

// ATen's maximum: NaN wins.
inline float nan_max(float a, float b) {
  const float larger = a < b ? b : a;
  return (a != a || b != b) ? std::numeric_limits<float>::quiet_NaN() : larger;
}

// One parameter's Adam or AdamW step, element by element as LibTorch's
// Adam::step / AdamW::step compute it:
//   AdamW   p = p * (1 - lr * weight_decay)            (p.mul_)
//   Adam    g = g + weight_decay * p                   (grad.add(p, wd))
//           m = m * beta1 + (1 - beta1) * g            (mul_, add_)
//           v = v * beta2 + (1 - beta2) * g * g        (mul_, addcmul_)
//   amsgrad vmax = max(vmax, v)                        (max_out)
//           d = sqrt(v or vmax) / sqrt(bias_correction2) + eps
//           p = p + (-lr / bias_correction1) * m / d   (addcdiv_)
// ATen's sqrt is not always std::sqrt (PyPI's LibTorch 2.x takes MKL's,
// which can be an ulp off): then a step is two passes, the moments, then the
// parameters from ATen's own sqrt of them (`root`), so that it stays bitwise.
enum class AdamPart { kWhole, kMoments, kParams };
struct AdamPass {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;     // amsgrad, else null
  AdamPart part;
  const float* root;  // kParams: sqrt(v or vmax), computed by ATen
  bool l2;         // Adam's weight decay
  bool decoupled;  // AdamW's weight decay
  float weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bias_correction2, eps, neg_step;
};

// The options are template arguments: a loop without branches vectorizes.
template <bool kFma, bool kL2, bool kDecoupled, bool kAmsgrad, AdamPart kPart>
inline __attribute__((always_inline)) void adam_loop(const AdamPass& a, int64_t begin, int64_t end) {
  float* __restrict p = a.p;
  const float* __restrict g = a.g;
  float* __restrict m = a.m;
  float* __restrict v = a.v;
  float* __restrict vmax = a.vmax;
  const float* __restrict root = a.root;
  for (int64_t i = begin; i < end; ++i) {
    float pi = p[i];
    float mi, rooti;
    if constexpr (kPart == AdamPart::kParams) {
      mi = m[i];
      rooti = root[i];
    } else {
      float gi = g[i];
      if constexpr (kL2) gi = mul_add<kFma>(pi, a.weight_decay, gi);
      mi = mul_add<kFma>(gi, a.one_minus_beta1, m[i] * a.beta1);
      const float vi = mul_add<kFma>(a.one_minus_beta2 * gi, gi, v[i] * a.beta2);
      m[i] = mi;
      v[i] = vi;
      float second = vi;
      if constexpr (kAmsgrad) {
        second = nan_max(vmax[i], vi);
        vmax[i] = second;
      }
      if constexpr (kPart == AdamPart::kMoments) continue;
      rooti = std::sqrt(second);
    }
    if constexpr (kDecoupled) pi = pi * a.decay;
    const float denom = rooti / a.sqrt_bias_correction2 + a.eps;
    p[i] = pi + a.neg_step * mi / denom;
  }
}

template <bool kFma, bool kAmsgrad, AdamPart kPart>
inline __attribute__((always_inline)) void adam_decay(const AdamPass& a, int64_t begin, int64_t end) {
  if (a.l2) {
    adam_loop<kFma, true, false, kAmsgrad, kPart>(a, begin, end);
  } else if (a.decoupled) {
    adam_loop<kFma, false, true, kAmsgrad, kPart>(a, begin, end);
  } else {
    adam_loop<kFma, false, false, kAmsgrad, kPart>(a, begin, end);
  }
}

template <bool kFma, AdamPart kPart>
inline __attribute__((always_inline)) void adam_part(const AdamPass& a, int64_t begin, int64_t end) {
  if (a.vmax != nullptr) {
    adam_decay<kFma, true, kPart>(a, begin, end);
  } else {
    adam_decay<kFma, false, kPart>(a, begin, end);
  }
}

template <bool kFma>
inline __attribute__((always_inline)) void adam_any(const AdamPass& a, int64_t begin, int64_t end) {
  switch (a.part) {
    case AdamPart::kWhole:
      return adam_part<kFma, AdamPart::kWhole>(a, begin, end);
    case AdamPart::kMoments:
      return adam_part<kFma, AdamPart::kMoments>(a, begin, end);
    case AdamPart::kParams:
      return adam_part<kFma, AdamPart::kParams>(a, begin, end);
  }
}

// One parameter's SGD step as LibTorch's SGD::step:
//   d = g + weight_decay * p                        (d_p.add(p, wd))
//   b = d on the first step, else b * momentum + (1 - dampening) * d
//   d = nesterov ? d + momentum * b : b
//   p = p + (-lr) * d                               (add_)
enum class Momentum { kNone, kFirst, kLater };

struct SgdPass {
  float* p;
  const float* g;
  float* buffer;  // momentum, else null
  Momentum momentum_step;
  bool l2, nesterov;
  float weight_decay, momentum, one_minus_dampening, neg_lr;
};

template <bool kFma, bool kL2, Momentum kMomentum, bool kNesterov>
inline __attribute__((always_inline)) void sgd_loop(const SgdPass& a, int64_t begin, int64_t end) {
  float* __restrict p = a.p;
  const float* __restrict g = a.g;
  float* __restrict buffer = a.buffer;
  for (int64_t i = begin; i < end; ++i) {
    const float pi = p[i];
    float d = g[i];
    if constexpr (kL2) d = mul_add<kFma>(pi, a.weight_decay, d);
    if constexpr (kMomentum != Momentum::kNone) {
      const float b =
          kMomentum == Momentum::kFirst ? d : mul_add<kFma>(d, a.one_minus_dampening, buffer[i] * a.momentum);
      buffer[i] = b;
      d = kNesterov ? mul_add<kFma>(b, a.momentum, d) : b;
    }
    p[i] = mul_add<kFma>(d, a.neg_lr, pi);
  }
}

template <bool kFma, bool kL2>
inline __attribute__((always_inline)) void sgd_momentum(const SgdPass& a, int64_t begin, int64_t end) {
  switch (a.momentum_step) {
    case Momentum::kNone:
      return sgd_loop<kFma, kL2, Momentum::kNone, false>(a, begin, end);
    case Momentum::kFirst:
      return a.nesterov ? sgd_loop<kFma, kL2, Momentum::kFirst, true>(a, begin, end)
                        : sgd_loop<kFma, kL2, Momentum::kFirst, false>(a, begin, end);
    case Momentum::kLater:
      return a.nesterov ? sgd_loop<kFma, kL2, Momentum::kLater, true>(a, begin, end)
                        : sgd_loop<kFma, kL2, Momentum::kLater, false>(a, begin, end);
  }
}

template <bool kFma>
inline __attribute__((always_inline)) void sgd_any(const SgdPass& a, int64_t begin, int64_t end) {
  if (a.l2) {
    sgd_momentum<kFma, true>(a, begin, end);
  } else {
    sgd_momentum<kFma, false>(a, begin, end);
  }
}

// The fused variants carry the FMA instruction set (used only where ATen's own
// kernels fuse, which they do only with it); the loops inline into them.
#if defined(__x86_64__)
#define LT_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define LT_FMA_TARGET
#endif
LT_FMA_TARGET void adam_fused(const AdamPass& a, int64_t begin, int64_t end) { adam_any<true>(a, begin, end); }
void adam_twice(const AdamPass& a, int64_t begin, int64_t end) { adam_any<false>(a, begin, end); }
LT_FMA_TARGET void sgd_fused(const SgdPass& a, int64_t begin, int64_t end) { sgd_any<true>(a, begin, end); }
void sgd_twice(const SgdPass& a, int64_t begin, int64_t end) { sgd_any<false>(a, begin, end); }

// Deterministic values of many magnitudes (the process's random generators
// are the user's: not touched).
torch::Tensor probe_values(uint32_t seed, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  uint32_t x = seed;
  for (float& value : values) {
    x = x * 1664525u + 1013904223u;
    const float unit = static_cast<float>(x >> 8) / static_cast<float>(1u << 24);
    value = (unit - 0.5f) * std::ldexp(1.0f, static_cast<int>(x % 16) - 8);
  }
  return torch::tensor(values);
}

// Which rounding ATen's add (with alpha) and addcmul take here, on a probe
// long enough for the vectorized code and a tail.
Rounding measure_rounding() {
  torch::NoGradGuard no_grad;
  constexpr int64_t kSize = 1031;
  const torch::Tensor a = probe_values(1, kSize), b = probe_values(2, kSize);
  const double alpha = 0.1, value = 0.001;
  const torch::Tensor added = a.add(b, alpha), multiplied = a.addcmul(b, b, value);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  const float* padded = added.data_ptr<float>();
  const float* pmultiplied = multiplied.data_ptr<float>();
  const auto alpha_f = static_cast<float>(alpha), value_f = static_cast<float>(value);
  bool fused = true, twice = true;
  for (int64_t i = 0; i < kSize; ++i) {
    fused = fused && padded[i] == mul_add<true>(pb[i], alpha_f, pa[i]) &&
            pmultiplied[i] == mul_add<true>(value_f * pb[i], pb[i], pa[i]);
    twice = twice && padded[i] == mul_add<false>(pb[i], alpha_f, pa[i]) &&
            pmultiplied[i] == mul_add<false>(value_f * pb[i], pb[i], pa[i]);
  }
  // Both hold only where no element tells them apart: the probe is built so
  // that many do.
  if (fused == twice) return Rounding::kUnmatched;
  return fused ? Rounding::kFused : Rounding::kTwice;
}

Rounding aten_rounding() {
  static const Rounding rounding = measure_rounding();
  return rounding;
}

// Whether ATen's float sqrt is std::sqrt (correctly rounded) here.
bool aten_sqrt_is_exact() {
  static const bool exact = [] {
    torch::NoGradGuard no_grad;
    const torch::Tensor a = probe_values(3, 1031).abs(), root = a.sqrt();
    const float* pa = a.data_ptr<float>();
    const float* proot = root.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (proot[i] != std::sqrt(pa[i])) return false;
    }
    return true;
  }();
  return exact;
}

bool fusable(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() && t.layout() == torch::kStrided && t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
         t.is_contiguous() && t.sizes() == like.sizes();
}

enum class Kind { kNone, kSgd, kAdam, kAdamW };

Kind kind_of(const torch::optim::Optimizer& optimizer) {
  const std::type_info& type = typeid(optimizer);
  if (type == typeid(torch::optim::SGD)) return Kind::kSgd;
  if (type == typeid(torch::optim::Adam)) return Kind::kAdam;
  if (type == typeid(torch::optim::AdamW)) return Kind::kAdamW;
  return Kind::kNone;
}

// The state tensors a step reads for `p`, where it has state already.
std::vector<torch::Tensor> state_tensors(Kind kind, torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  const auto found = optimizer.state().find(optimizer_state_key(p));
  if (found == optimizer.state().end()) return {};
  if (kind == Kind::kSgd) return {static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer()};
  if (kind == Kind::kAdam) {
    auto& s = static_cast<torch::optim::AdamParamState&>(*found->second);
    return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
  }
  auto& s = static_cast<torch::optim::AdamWParamState&>(*found->second);
  return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
}

bool fusable(Kind kind, torch::optim::Optimizer& optimizer) {
  if (kind == Kind::kNone || aten_rounding() == Rounding::kUnmatched) return false;
  for (auto& group : optimizer.param_groups()) {
    const bool amsgrad = kind == Kind::kAdam    ? static_cast<torch::optim::AdamOptions&>(group.options()).amsgrad()
                         : kind == Kind::kAdamW ? static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()
                                                : false;
    const bool momentum =
        kind == Kind::kSgd && static_cast<torch::optim::SGDOptions&>(group.options()).momentum() != 0;
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fusable(p, p) || !fusable(p.grad(), p)) return false;
      const std::vector<torch::Tensor> state = state_tensors(kind, optimizer, p);
      for (size_t i = 0; i < state.size(); ++i) {
        const bool used = kind == Kind::kSgd ? momentum : (i < 2 || amsgrad);
        if (used && !fusable(state[i], p)) return false;
      }
    }
  }
  return true;
}

template <typename Pass>
void run(void (*fused)(const Pass&, int64_t, int64_t), void (*twice)(const Pass&, int64_t, int64_t), const Pass& pass,
         int64_t numel) {
  const auto loop = aten_rounding() == Rounding::kFused ? fused : twice;
  at::parallel_for(0, numel, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) { loop(pass, begin, end); });
}

void bump_versions(std::initializer_list<torch::Tensor> tensors) {
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) t.unsafeGetTensorImpl()->bump_version();
  }
}

// A scalar LibTorch passes as an `alpha` or `value` (add_, addcmul_,
// addcdiv_): converted with its check, so a value beyond float's range throws
// LibTorch's error ("value cannot be converted to type float without
// overflow"), before this parameter changes.
float alpha(double value) { return c10::Scalar(value).to<float>(); }

void step_sgd(torch::optim::SGD& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      const OptimizerStateKey key = optimizer_state_key(p);
      auto found = optimizer.state().find(key);
      const bool first = found == optimizer.state().end();
      SgdPass pass{};
      pass.p = p.data_ptr<float>();
      pass.g = p.grad().data_ptr<float>();
      pass.l2 = options.weight_decay() != 0;
      pass.weight_decay = pass.l2 ? alpha(options.weight_decay()) : 0.f;
      pass.nesterov = options.nesterov();
      pass.momentum = options.nesterov() ? alpha(options.momentum()) : static_cast<float>(options.momentum());
      pass.one_minus_dampening =
          options.momentum() != 0 && !first ? alpha(1 - options.dampening()) : static_cast<float>(1 - options.dampening());
      pass.neg_lr = alpha(-1 * options.lr());
      torch::Tensor buffer;
      if (options.momentum() != 0) {
        pass.momentum_step = first ? Momentum::kFirst : Momentum::kLater;
        if (first) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(torch::empty_like(p));
          buffer = state->momentum_buffer();
          optimizer.state()[key] = std::move(state);
        } else {
          buffer = static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer();
        }
        pass.buffer = buffer.data_ptr<float>();
      }
      run(sgd_fused, sgd_twice, pass, p.numel());
      bump_versions({p, buffer});
    }
  }
}

template <typename Options, typename State>
void step_adam(torch::optim::Optimizer& optimizer, bool decoupled) {
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<Options&>(group.options());
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      const OptimizerStateKey key = optimizer_state_key(p);
      auto found = optimizer.state().find(key);
      const int64_t step = found == optimizer.state().end() ? 1 : static_cast<State&>(*found->second).step() + 1;
      const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
      const double bias_correction1 = 1 - std::pow(beta1, step);
      const double bias_correction2 = 1 - std::pow(beta2, step);
      AdamPass pass{};
      pass.l2 = !decoupled && options.weight_decay() != 0;
      pass.decoupled = decoupled && options.weight_decay() != 0;
      pass.weight_decay = pass.l2 ? alpha(options.weight_decay()) : 0.f;
      pass.decay = static_cast<float>(1 - options.lr() * options.weight_decay());
      pass.beta1 = static_cast<float>(beta1);
      pass.one_minus_beta1 = alpha(1 - beta1);
      pass.beta2 = static_cast<float>(beta2);
      pass.one_minus_beta2 = alpha(1 - beta2);
      pass.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
      pass.eps = static_cast<float>(options.eps());
      pass.neg_step = alpha(-(options.lr() / bias_correction1));
      if (found == optimizer.state().end()) {
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) state->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = optimizer.state().emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<State&>(*found->second);
      state.step(step);
      pass.p = p.data_ptr<float>();
      pass.g = p.grad().data_ptr<float>();
      pass.m = state.exp_avg().template data_ptr<float>();
      pass.v = state.exp_avg_sq().template data_ptr<float>();
      pass.vmax = options.amsgrad() ? state.max_exp_avg_sq().template data_ptr<float>() : nullptr;
      if (aten_sqrt_is_exact()) {
        pass.part = AdamPart::kWhole;
        run(adam_fused, adam_twice, pass, p.numel());
      } else {
        pass.part = AdamPart::kMoments;
        run(adam_fused, adam_twice, pass, p.numel());
        const torch::Tensor root = (options.amsgrad() ? state.max_exp_avg_sq() : state.exp_avg_sq()).sqrt();
        pass.root = root.template data_ptr<float>();
        pass.part = AdamPart::kParams;
        run(adam_fused, adam_twice, pass, p.numel());
      }
      bump_versions({p, state.exp_avg(), state.exp_avg_sq(), options.amsgrad() ? state.max_exp_avg_sq() : torch::Tensor()});
    }
  }
}

}  // namespace

bool steps_fused(torch::optim::Optimizer& optimizer) { return fusable(kind_of(optimizer), optimizer); }

void step_optimizer(torch::optim::Optimizer& optimizer) {
  const Kind kind = kind_of(optimizer);
  if (!fusable(kind, optimizer)) {
    optimizer.step();
    return;
  }
  torch::NoGradGuard no_grad;
  switch (kind) {
    case Kind::kSgd:
      step_sgd(static_cast<torch::optim::SGD&>(optimizer));
      break;
    case Kind::kAdam:
      step_adam<torch::optim::AdamOptions, torch::optim::AdamParamState>(optimizer, false);
      break;
    case Kind::kAdamW:
      step_adam<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(optimizer, true);
      break;
    case Kind::kNone:
      break;
  }
}

}  // namespace lt
