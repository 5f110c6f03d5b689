#include <lightning_cpp/core/batch.h>

#include <lightning_cpp/core/check.h>

namespace lt {

bool Batch::contains(const std::string& key) const {
  if (key == "data") return data.defined();
  if (key == "target") return target.defined();
  return fields.count(key) != 0;
}

const torch::Tensor& Batch::operator[](const std::string& key) const {
  if (key == "data" && data.defined()) return data;
  if (key == "target" && target.defined()) return target;
  auto it = fields.find(key);
  if (it == fields.end()) {
    std::string keys;
    for (const auto& [name, tensor] : tensors()) keys += (keys.empty() ? "" : ", ") + name;
    throw ValueError(c10::str("batch has no tensor '", key, "'; it has: ", keys.empty() ? "none" : keys));
  }
  return it->second;
}

std::vector<std::pair<std::string, torch::Tensor>> Batch::tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (data.defined()) out.emplace_back("data", data);
  if (target.defined()) out.emplace_back("target", target);
  for (const auto& [key, tensor] : fields) {
    if (tensor.defined()) out.emplace_back(key, tensor);
  }
  return out;
}

int64_t Batch::size() const {
  // Asked per batch by the loops: no copy of the tensor list.
  for (const torch::Tensor* t : {&data, &target}) {
    if (t->defined() && t->dim() >= 1) return t->size(0);
  }
  for (const auto& [key, tensor] : fields) {
    if (tensor.defined() && tensor.dim() >= 1) return tensor.size(0);
  }
  return 0;
}

Batch Batch::map(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const {
  Batch out;
  if (data.defined()) out.data = fn(data);
  if (target.defined()) out.target = fn(target);
  for (const auto& [key, tensor] : fields) out.fields[key] = tensor.defined() ? fn(tensor) : tensor;
  return out;
}

std::string Batch::describe() const {
  std::string out;
  for (const auto& [key, tensor] : tensors()) {
    out += c10::str(out.empty() ? "" : ", ", key, " ", tensor.sizes(), " ", tensor.scalar_type());
  }
  return out.empty() ? "no tensors" : out;
}

}  // namespace lt
