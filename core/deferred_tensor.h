#pragma once
// Placeholders: tensors whose values are elsewhere. A sharding strategy's
// checkpoint holds a placeholder (the shape, dtype and device, no bytes) for
// each tensor a rank holds only a part of; the save writes everything else,
// then calls the DeferredValues once, which hands over each placeholder's
// value (gathered a unit at a time), so that no rank ever holds the whole
// model. A checkpoint reader may give placeholders too (a sharded
// checkpoint's values, read from its rank files on demand,
// plugins/io/sharded_checkpoint.h): copy_elements reads the part a rank needs.
// Invariants:
//   - a placeholder has a storage of its bytes' size and no data pointer;
//     reading its data is an error of the caller (is_deferred tells one);
//   - an empty tensor is never a placeholder (nothing to defer);
//   - a placeholder a reader made carries, in its DataPtr's context, the
//     DeferredSource that reads its elements; one deferred_tensor made has none.

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

namespace lt {

torch::Tensor deferred_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options);
bool is_deferred(const torch::Tensor& tensor);

// write(placeholder, value): value has the placeholder's shape and dtype. A
// DeferredValues is called on every rank (its gathers are collectives); only
// the writing rank's write() writes, the others' ignore what they are given.
using DeferredWrite = std::function<void(const torch::Tensor& placeholder, const torch::Tensor& value)>;
using DeferredValues = std::function<void(const DeferredWrite& write)>;

// Where a reader's placeholder finds its elements.
class DeferredSource {
 public:
  virtual ~DeferredSource() = default;
  // Copies elements [begin, begin + out.numel()) of the value's storage (its
  // elements in order) into `out` (contiguous, of the value's dtype).
  virtual void read(int64_t begin, const torch::Tensor& out) const = 0;
};
// The DataPtr of a placeholder whose elements `source` reads: a storage made
// with it is deferred (is_deferred), and copy_elements asks `source`.
at::DataPtr deferred_data(std::unique_ptr<DeferredSource> source, at::Device device);

// Copies elements [begin, begin + dst.numel()) of `value` (contiguous, its
// elements in order) into `dst`: read from its DeferredSource where `value` is
// a reader's placeholder. materialized(value): all of them, as a tensor.
void copy_elements(const torch::Tensor& value, int64_t begin, const torch::Tensor& dst);
torch::Tensor materialized(const torch::Tensor& value);

}  // namespace lt
