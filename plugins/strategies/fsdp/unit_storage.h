#pragma once
// UnitStorage: the bytes behind each unit's flat buffer `full` (W * S_u
// elements, the unit's parameters are views of it) and the temporary buffers
// of its size.
//
// Invariants:
//   - free(u) releases `full`'s bytes (its storage resized to 0 bytes, its
//     sizes kept), so that what autograd saved of the parameters sees the
//     values again once materialize(u) gives the storage new bytes and a
//     gather fills them. Values are not kept: materialize(u) gives bytes only.
//   - On the CPU, every block (a `full`'s bytes and buffer()'s) comes from a
//     pool of blocks of the units' sizes and goes back to it when released, so
//     gathering and freeing every step does not grow the C heap (glibc's mmap
//     threshold grows to the sizes it sees freed). The pool lives as long as
//     its last block. On a GPU the caching allocator does this.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace lt {

class UnitStorage {
 public:
  // The next unit's `full`: `numel` zeros of `options`. Returns its index.
  size_t add(int64_t numel, const torch::TensorOptions& options);

  size_t size() const { return units_.size(); }
  torch::Tensor& full(size_t u) { return units_.at(u).full; }
  const torch::Tensor& full(size_t u) const { return units_.at(u).full; }
  // Whether unit u's `full` holds bytes.
  bool materialized(size_t u) const { return units_.at(u).materialized; }
  // Gives `full` bytes (not their values) where freed.
  void materialize(size_t u);
  void free(size_t u);
  // A tensor shaped like unit u's `full`, uninitialized (pooled on the CPU).
  torch::Tensor buffer(size_t u) const;

  class BlockPool;

 private:
  struct Unit {
    torch::Tensor full;
    bool materialized = true;
  };
  std::vector<Unit> units_;
  std::shared_ptr<BlockPool> pool_;  // the CPU's
};

}  // namespace lt
