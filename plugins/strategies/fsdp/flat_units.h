#pragma once
// FlatUnits: how fsdp partitions a module's trainable parameters into units,
// and where each parameter's elements lie in its unit's flat buffer and in a
// rank's shard. Pure: no collective, no storage (flat_shard.h wires them).
//
// Invariants:
//   - The units: each lt::FSDPUnit the model declares (fsdp_unit.h; a
//     parameter belongs to the innermost), then, with min_num_params > 0, each
//     submodule holding at least that many parameters not yet in a unit
//     (bottom-up, as PyTorch's size_based_auto_wrap_policy), and the root: the
//     rest. Units are ordered by their first parameter in parameters().
//   - Unit u's flat buffer has W * S_u elements (S_u = ceil(n_u / W)): its
//     parameters end to end from offset 0, then zeros; rank r owns chunk r.
//   - A rank's shard is its chunks of every unit, in unit order, end to end:
//     S = sum S_u elements, unit u's at shard_offset.
//   - A unit's parameters share one dtype and device.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/plugins/strategies/fsdp/fsdp_unit.h>

namespace lt {

struct FlatUnit {
  std::string name;                  // the module path heading it ("" for the root)
  FSDPUnitBase* declared = nullptr;  // an lt::FSDPUnit, or null (policy, root)
  std::vector<size_t> params;        // into FlatUnits::parameters(), in the module's order
  std::vector<int64_t> offsets;      // where each starts in the flat buffer
  int64_t chunk = 0;                 // S_u
  int64_t shard_offset = 0;          // where the rank's chunk starts in its shard
};

class FlatUnits {
 public:
  FlatUnits(torch::nn::Module& module, int64_t world_size, int64_t rank, int64_t min_num_params);

  // The module's trainable parameters, each once, in the module's order.
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  size_t size() const { return units_.size(); }
  const FlatUnit& operator[](size_t u) const { return units_[u]; }
  const FlatUnit& at(size_t u) const { return units_.at(u); }
  std::vector<std::string> names() const;
  // The unit a declared lt::FSDPUnit heads.
  size_t index_of(const FSDPUnitBase& declared) const;
  int64_t world_size() const { return world_size_; }
  int64_t rank() const { return rank_; }
  // W * S_u.
  int64_t flat_numel(size_t u) const { return world_size_ * units_.at(u).chunk; }
  // S.
  int64_t shard_numel() const { return shard_numel_; }

  // The j-th parameter of unit u, shaped like it, as a view of a flat buffer of the unit.
  torch::Tensor parameter_view(size_t u, size_t j, const torch::Tensor& flat) const;
  // Unit u's chunk in a rank's shard (S elements).
  torch::Tensor chunk_of_shard(size_t u, const torch::Tensor& shard) const;
  // This rank's chunk of a flat buffer of unit u.
  torch::Tensor chunk_of_flat(size_t u, const torch::Tensor& flat) const;
  // This rank's shard (S elements) of tensors shaped like parameters(); a
  // deferred tensor (a sharded checkpoint's placeholder) is read for just the
  // elements in the rank's chunks.
  torch::Tensor flatten(const std::vector<torch::Tensor>& whole) const;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<FlatUnit> units_;
  int64_t world_size_;
  int64_t rank_;
  int64_t shard_numel_ = 0;
};

}  // namespace lt
