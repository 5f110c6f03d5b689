#include <lightning_cpp/core/state_dict.h>

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>

namespace lt {

c10::Dict<std::string, torch::Tensor> module_state_dict(const torch::nn::Module& module) {
  c10::Dict<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.insert(p.key(), p.value().detach());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.insert(b.key(), b.value().detach());
  return out;
}

void load_module_state_dict(torch::nn::Module& module, const c10::Dict<std::string, torch::Tensor>& state,
                            bool strict) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  size_t matched = 0;
  auto copy_into = [&](const std::string& name, torch::Tensor& target) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      return;
    }
    const torch::Tensor& source = it->value();
    LT_CHECK_VALUE(source.sizes() == target.sizes(), "state_dict: '", name, "' has shape ", source.sizes(),
                   " but the module expects ", target.sizes());
    copy_elements(source, 0, target);  // a sharded checkpoint's placeholder: read from its rank files
    ++matched;
  };
  for (auto& p : module.named_parameters(true)) copy_into(p.key(), p.value());
  for (auto& b : module.named_buffers(true)) copy_into(b.key(), b.value());
  if (strict) {
    LT_CHECK_VALUE(missing.empty(), "state_dict: missing key(s) ", c10::Join(", ", missing));
    LT_CHECK_VALUE(matched == state.size(), "state_dict: ", state.size() - matched,
                   " unexpected key(s) not in the module");
  }
}

c10::Dict<std::string, torch::Tensor> state_dict_from(const c10::IValue& loaded, const std::string& path) {
  LT_CHECK_VALUE(loaded.isGenericDict(), "'", path, "' holds no state_dict (not a dict)");
  auto dict = loaded.toGenericDict();
  // A lightning-cpp (or Lightning) checkpoint nests the weights under "state_dict".
  if (dict.contains("state_dict") && dict.at("state_dict").isGenericDict()) {
    dict = dict.at("state_dict").toGenericDict();
  }
  c10::Dict<std::string, torch::Tensor> weights;
  for (const auto& kv : dict) {
    LT_CHECK_VALUE(kv.key().isString() && kv.value().isTensor(), "'", path,
                   "' is not a state_dict: expected {name: tensor}, found a ", kv.value().tagKind(), " entry");
    weights.insert(kv.key().toStringRef(), kv.value().toTensor());
  }
  return weights;
}

std::vector<torch::Tensor> tensor_list(const c10::IValue& list) {
  LT_CHECK_VALUE(list.isList(), "tensor_list: expected a list of tensors, got a ", list.tagKind());
  std::vector<torch::Tensor> out;
  for (const c10::IValue& item : list.toListRef()) {
    LT_CHECK_VALUE(item.isTensor(), "tensor_list: item ", out.size(), " is a ", item.tagKind(), ", not a tensor");
    out.push_back(item.toTensor());
  }
  return out;
}

StateDict rng_states() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  StateDict rng = new_state_dict();
  rng.insert("torch", gen.get_state());
  return rng;
}

void load_rng_states(const StateDict& states) {
  if (!states.contains("torch")) return;
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(states.at("torch").toTensor());
}

}  // namespace lt
