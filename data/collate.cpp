#include <lightning_cpp/data/collate.h>

#include <algorithm>
#include <string>

#include <torch/torch.h>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// Every example's tensor under `key`, checked to be there with one dtype and rank.
std::vector<torch::Tensor> gather_key(const std::vector<Batch>& examples, const std::string& key) {
  std::vector<torch::Tensor> out;
  out.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    LT_CHECK_VALUE(examples[i].contains(key), "collate: example ", i, " has no '", key, "' (example 0 has: ",
                   examples[0].describe(), ")");
    const torch::Tensor& t = examples[i][key];
    if (!out.empty()) {
      LT_CHECK_VALUE(t.scalar_type() == out.front().scalar_type() && t.dim() == out.front().dim(), "collate: '",
                     key, "' of example ", i, " is ", t.sizes(), " ", t.scalar_type(), " but of example 0 ",
                     out.front().sizes(), " ", out.front().scalar_type());
    }
    out.push_back(t);
  }
  return out;
}

// Sets `key` of `batch` to `value`.
void put(Batch& batch, const std::string& key, torch::Tensor value) {
  if (key == "data") {
    batch.data = std::move(value);
  } else if (key == "target") {
    batch.target = std::move(value);
  } else {
    batch.fields[key] = std::move(value);
  }
}

}  // namespace

Batch collate(const std::vector<Batch>& examples) {
  LT_CHECK_VALUE(!examples.empty(), "collate: no examples");
  Batch out;
  for (const auto& [key, first] : examples.front().tensors()) {
    std::vector<torch::Tensor> parts = gather_key(examples, key);
    for (size_t i = 1; i < parts.size(); ++i) {
      LT_CHECK_VALUE(parts[i].sizes() == first.sizes(), "collate: '", key, "' of example ", i, " has shape ",
                     parts[i].sizes(), " but example 0 has ", first.sizes(),
                     "; for variable-length examples use lt::pad_collate");
    }
    put(out, key, torch::stack(parts));
  }
  return out;
}

Batch pad_collate(const std::vector<Batch>& examples, const PadCollateOptions& options) {
  LT_CHECK_VALUE(!examples.empty(), "pad_collate: no examples");
  Batch out;
  for (const auto& [key, first] : examples.front().tensors()) {
    std::vector<torch::Tensor> parts = gather_key(examples, key);
    const auto& keys = options.keys();
    const bool sequence = keys.empty() ? first.dim() >= 1 : std::find(keys.begin(), keys.end(), key) != keys.end();
    LT_CHECK_VALUE(!sequence || first.dim() >= 1, "pad_collate: '", key, "' is a 0-dim tensor, not a sequence");
    if (!sequence) {
      put(out, key, torch::stack(parts));
      continue;
    }
    int64_t longest = 0;
    std::vector<int64_t> lengths;
    for (size_t i = 0; i < parts.size(); ++i) {
      LT_CHECK_VALUE(parts[i].sizes().slice(1) == first.sizes().slice(1), "pad_collate: '", key, "' of example ", i,
                     " has shape ", parts[i].sizes(), " but example 0 has ", first.sizes(),
                     " (only dimension 0, the sequence, may differ)");
      lengths.push_back(parts[i].size(0));
      longest = std::max(longest, parts[i].size(0));
    }
    std::vector<int64_t> shape{static_cast<int64_t>(parts.size()), longest};
    for (int64_t d = 1; d < first.dim(); ++d) shape.push_back(first.size(d));
    torch::Tensor padded = torch::full(shape, options.padding_value(), first.options());
    for (size_t i = 0; i < parts.size(); ++i) padded[static_cast<int64_t>(i)].narrow(0, 0, lengths[i]).copy_(parts[i]);
    torch::Tensor length = torch::tensor(lengths, torch::kLong);
    put(out, key, padded);
    out.fields[key + "_lengths"] = length;
    out.fields[key + "_mask"] = torch::arange(longest, torch::kLong).unsqueeze(0) < length.unsqueeze(1);
  }
  return out;
}

}  // namespace lt
