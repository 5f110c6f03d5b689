#include <lightning_cpp/plugins/strategies/fsdp/flat_units.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>

namespace lt {

FlatUnits::FlatUnits(torch::nn::Module& module, int64_t world_size, int64_t rank, int64_t min_num_params)
    : world_size_(world_size), rank_(rank) {
  LT_INTERNAL_ASSERT(world_size > 0 && rank >= 0 && rank < world_size, "FlatUnits: rank ", rank, " of ", world_size);
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params_.push_back(p);
  }
  LT_CHECK(!params_.empty(), "strategy fsdp: the module has no trainable parameter");

  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = i;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> owner(params_.size(), kNone);
  // A submodule's parameters not yet in a unit become one (bottom-up: the innermost first).
  auto claim = [&](const std::string& name, torch::nn::Module& m, FSDPUnitBase* declared) {
    std::vector<size_t> mine;
    for (const auto& p : m.parameters(/*recurse=*/true)) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it != index.end() && owner[it->second] == kNone) mine.push_back(it->second);
    }
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    int64_t numel = 0;
    for (size_t i : mine) numel += params_[i].numel();
    if (mine.empty() || (declared == nullptr && numel < min_num_params)) return;
    for (size_t i : mine) owner[i] = units_.size();
    FlatUnit unit;
    unit.name = name;
    unit.declared = declared;
    unit.params = std::move(mine);
    units_.push_back(std::move(unit));
  };
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    modules.emplace_back(item.key(), item.value());
  }
  // Post-order: a module after its descendants (named_modules is pre-order: reversed).
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    if (auto* declared = dynamic_cast<FSDPUnitBase*>(it->second.get())) claim(it->first, *it->second, declared);
  }
  if (min_num_params > 0) {
    for (auto it = modules.rbegin(); it != modules.rend(); ++it) claim(it->first, *it->second, nullptr);
  }
  std::vector<size_t> rest;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner[i] == kNone) rest.push_back(i);
  }
  if (!rest.empty()) {
    FlatUnit root;
    root.params = std::move(rest);
    units_.push_back(std::move(root));
  }
  std::sort(units_.begin(), units_.end(),
            [](const FlatUnit& a, const FlatUnit& b) { return a.params[0] < b.params[0]; });

  for (FlatUnit& unit : units_) {
    const torch::Tensor& first = params_[unit.params[0]];
    int64_t numel = 0;
    for (size_t i : unit.params) {
      const torch::Tensor& p = params_[i];
      LT_CHECK_VALUE(p.dtype() == first.dtype() && p.device() == first.device(), "strategy fsdp: the trainable ",
                     "parameters of a unit must share one dtype and device (they are flattened into one buffer); ",
                     "unit '", unit.name, "' has ", p.dtype(), " on ", p.device(), " and ", first.dtype(), " on ",
                     first.device());
      unit.offsets.push_back(numel);
      numel += p.numel();
    }
    unit.chunk = (numel + world_size_ - 1) / world_size_;
    unit.shard_offset = shard_numel_;
    shard_numel_ += unit.chunk;
  }
}

std::vector<std::string> FlatUnits::names() const {
  std::vector<std::string> names;
  for (const FlatUnit& unit : units_) names.push_back(unit.name);
  return names;
}

size_t FlatUnits::index_of(const FSDPUnitBase& declared) const {
  const auto it =
      std::find_if(units_.begin(), units_.end(), [&](const FlatUnit& u) { return u.declared == &declared; });
  LT_INTERNAL_ASSERT(it != units_.end(), "FlatUnits: an lt::FSDPUnit it does not know");
  return static_cast<size_t>(it - units_.begin());
}

torch::Tensor FlatUnits::parameter_view(size_t u, size_t j, const torch::Tensor& flat) const {
  const FlatUnit& unit = units_.at(u);
  const torch::Tensor& p = params_[unit.params.at(j)];
  return flat.narrow(0, unit.offsets[j], p.numel()).view(p.sizes());
}

torch::Tensor FlatUnits::chunk_of_shard(size_t u, const torch::Tensor& shard) const {
  const FlatUnit& unit = units_.at(u);
  return shard.narrow(0, unit.shard_offset, unit.chunk);
}

torch::Tensor FlatUnits::chunk_of_flat(size_t u, const torch::Tensor& flat) const {
  const FlatUnit& unit = units_.at(u);
  return flat.narrow(0, rank_ * unit.chunk, unit.chunk);
}

torch::Tensor FlatUnits::flatten(const std::vector<torch::Tensor>& whole) const {
  LT_INTERNAL_ASSERT(whole.size() == params_.size(), "FlatUnits::flatten: ", whole.size(), " tensors for ",
                     params_.size(), " parameters");
  torch::NoGradGuard no_grad;
  torch::Tensor out = torch::zeros({shard_numel_}, whole[0].options());
  for (const FlatUnit& unit : units_) {
    // The parameters' elements in this rank's chunk [lo, hi) of the unit's flat buffer.
    const int64_t lo = rank_ * unit.chunk, hi = lo + unit.chunk;
    for (size_t j = 0; j < unit.params.size(); ++j) {
      const torch::Tensor& t = whole[unit.params[j]];
      const int64_t from = std::max(lo, unit.offsets[j]), to = std::min(hi, unit.offsets[j] + t.numel());
      if (from < to) copy_elements(t, from - unit.offsets[j], out.narrow(0, unit.shard_offset + from - lo, to - from));
    }
  }
  return out;
}

}  // namespace lt
