#include <lightning_cpp/core/deferred_tensor.h>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {
// The deleter that marks a DataPtr as deferred_data's (its context a DeferredSource).
void delete_source(void* source) { delete static_cast<DeferredSource*>(source); }
}  // namespace

torch::Tensor deferred_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  const int64_t numel = c10::multiply_integers(sizes);
  if (numel == 0) return torch::empty(sizes, options);  // nothing to defer (and no empty placeholder record)
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, at::DataPtr(nullptr, options.device()), nullptr,
                       /*resizable=*/false);
  return torch::empty({0}, options).set_(storage, 0, sizes);
}

bool is_deferred(const torch::Tensor& tensor) {
  return tensor.defined() && tensor.has_storage() && tensor.storage().nbytes() > 0 &&
         tensor.storage().data() == nullptr;
}

at::DataPtr deferred_data(std::unique_ptr<DeferredSource> source, at::Device device) {
  LT_INTERNAL_ASSERT(source != nullptr, "deferred_data: no source");
  return at::DataPtr(nullptr, source.release(), &delete_source, device);
}

void copy_elements(const torch::Tensor& value, int64_t begin, const torch::Tensor& dst) {
  torch::NoGradGuard no_grad;
  if (!is_deferred(value)) {
    dst.copy_(value.reshape(-1).narrow(0, begin, dst.numel()).view(dst.sizes()));
    return;
  }
  const at::DataPtr& data = value.storage().data_ptr();
  LT_INTERNAL_ASSERT(data.get_deleter() == &delete_source && value.is_contiguous(),
                     "copy_elements: a placeholder that no checkpoint reader made");
  const auto* source = static_cast<const DeferredSource*>(data.get_context());
  const bool direct = dst.is_contiguous() && dst.dtype() == value.dtype();
  const torch::Tensor out = direct ? dst : torch::empty(dst.sizes(), value.options());
  source->read(value.storage_offset() + begin, out.view(-1));
  if (!direct) dst.copy_(out);
}

torch::Tensor materialized(const torch::Tensor& value) {
  if (!is_deferred(value)) return value;
  torch::Tensor out = torch::empty(value.sizes(), value.options());
  copy_elements(value, 0, out);
  return out;
}

}  // namespace lt
