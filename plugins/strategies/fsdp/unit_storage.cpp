#include <lightning_cpp/plugins/strategies/fsdp/unit_storage.h>

#include <mutex>
#include <unordered_map>
#include <utility>

#include <c10/core/impl/alloc_cpu.h>

namespace lt {

// A block is handed out as a DataPtr whose deleter gives it back.
class UnitStorage::BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  ~BlockPool() {
    for (auto& [bytes, blocks] : free_) {
      for (void* block : blocks) c10::free_cpu(block);
    }
  }
  at::DataPtr take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* block = nullptr;
    auto& blocks = free_[bytes];
    if (blocks.empty()) {
      block = c10::alloc_cpu(bytes);
    } else {
      block = blocks.back();
      blocks.pop_back();
    }
    return at::DataPtr(block, new Taken{shared_from_this(), block, bytes}, &give_back, at::Device(at::kCPU));
  }
  // A CPU tensor of `numel` elements of `options`' dtype in a block.
  torch::Tensor tensor(int64_t numel, const torch::TensorOptions& options) {
    const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, take(bytes), nullptr, /*resizable=*/false);
    return torch::empty({0}, options).set_(storage, 0, {numel}, {1});
  }

 private:
  struct Taken {
    std::shared_ptr<BlockPool> pool;
    void* block;
    size_t bytes;
  };
  static void give_back(void* ctx) {
    std::unique_ptr<Taken> taken(static_cast<Taken*>(ctx));
    std::lock_guard<std::mutex> lock(taken->pool->mutex_);
    taken->pool->free_[taken->bytes].push_back(taken->block);
  }
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

size_t UnitStorage::add(int64_t numel, const torch::TensorOptions& options) {
  if (options.device().is_cpu() && !pool_) pool_ = std::make_shared<BlockPool>();
  units_.push_back(Unit{torch::zeros({numel}, options.requires_grad(false))});
  return units_.size() - 1;
}

void UnitStorage::materialize(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.materialized) return;
  c10::StorageImpl* storage = unit.full.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(unit.full.numel()) * unit.full.element_size();
  storage->set_data_ptr_noswap(unit.full.is_cpu() ? pool_->take(bytes) : storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  unit.materialized = true;
}

void UnitStorage::free(size_t u) {
  Unit& unit = units_.at(u);
  if (!unit.materialized) return;
  c10::StorageImpl* storage = unit.full.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  unit.materialized = false;
}

torch::Tensor UnitStorage::buffer(size_t u) const {
  const torch::Tensor& full = units_.at(u).full;
  return full.is_cpu() ? pool_->tensor(full.numel(), full.options()) : torch::empty({full.numel()}, full.options());
}

}  // namespace lt
