#include <lightning_cpp/data/dataset.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/collate.h>

namespace lt {

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  LT_INTERNAL_ASSERT(!indices.empty(), "Dataset::get_batch: empty index list");
  std::vector<Batch> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return collate(examples);
}

TensorDataset::TensorDataset(torch::Tensor data, torch::Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  LT_CHECK(data_.defined() && data_.dim() >= 1, "TensorDataset: data must have a leading example dimension");
  LT_CHECK(!targets_.defined() || targets_.size(0) == data_.size(0), "TensorDataset: data has ", data_.size(0),
           " rows but targets has ", targets_.size(0));
}

Batch TensorDataset::get(int64_t index) const {
  LT_CHECK(index >= 0 && index < size(), "TensorDataset: index ", index, " out of range [0, ", size(), ")");
  return {data_[index], targets_.defined() ? targets_[index] : torch::Tensor()};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  auto idx = torch::tensor(indices, torch::kLong);
  return {data_.index_select(0, idx), targets_.defined() ? targets_.index_select(0, idx) : torch::Tensor()};
}

}  // namespace lt
