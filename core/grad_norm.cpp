#include <lightning_cpp/core/grad_norm.h>

#include <cmath>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/strategy.h>

namespace lt {

std::map<std::string, double> grad_norm(LightningModule& module, double norm_type,
                                        const std::string& group_separator) {
  LT_CHECK_VALUE(norm_type > 0.0, "grad_norm: norm_type must be > 0 (or infinity), got ", norm_type);
  const std::string prefix = "grad_" + (std::isinf(norm_type) ? std::string("inf") : float_repr(norm_type)) + "_norm";
  std::map<std::string, double> out;
  std::vector<torch::Tensor> grads;
  for (const auto& p : module.named_parameters()) {
    const torch::Tensor& grad = p.value().grad();
    if (!grad.defined()) continue;
    grads.push_back(grad);
    out[prefix + group_separator + p.key()] = gradient_norm_of({grad}, norm_type, nullptr);
  }
  const detail::ModuleRuntime& runtime = detail::ModuleAccess::runtime(module);
  if (runtime.strategy != nullptr && runtime.optimizer != nullptr && runtime.optimizer->optimizer != nullptr) {
    out[prefix + "_total"] = runtime.strategy->gradient_norm(*runtime.optimizer->optimizer, norm_type);
  } else if (!grads.empty()) {
    out[prefix + "_total"] = gradient_norm_of(grads, norm_type, nullptr);  // outside a run: this module's
  }
  return out;
}

}  // namespace lt
