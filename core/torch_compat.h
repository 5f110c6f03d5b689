#pragma once
// The one place where lightning-cpp depends on which LibTorch it is built
// against: Debian's 1.13 and PyTorch's 2.x line (2.11 tested). Every other
// file is version-free; what differs between versions is wrapped here, keyed
// on TORCH_VERSION_* or, where a signature changed in a release not pinned
// down, on which signature the headers offer. Internal: not installed, and
// no installed header includes it.
//   - c10d process groups: 1.13's ProcessGroupGloo/NCCL are process groups;
//     2.x's are c10d::Backends that a ProcessGroup holds per device type.
//   - c10d::Reducer's constructor (per-bucket size limits in 1.13; later
//     releases added skip_all_reduce_unused_params, use_python_reducer and
//     bucket_bytes_cap_list).
//   - autocast: 1.13's per-device setters became (device type, ...) calls in
//     2.x, the old ones deprecated wrappers that warn on every call.
//   - the gradient scaler's fused kernels: CUDA-only before 2.3, which added
//     CPU kernels (torch.amp.GradScaler("cpu")).
//   - an accelerator's memory statistics: at::accelerator (2.x; 2.11 tested),
//     none in 1.13.

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

#define LT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if LT_TORCH_AT_LEAST(2, 11)
#include <ATen/DeviceAccelerator.h>
#endif

namespace lt::compat {

// -- autocast ---------------------------------------------------------------------------------
inline bool autocast_enabled(c10::DeviceType device) {
#if LT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if LT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  device == c10::DeviceType::CPU ? at::autocast::set_cpu_enabled(enabled) : at::autocast::set_enabled(enabled);
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if LT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype) {
#if LT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  device == c10::DeviceType::CPU ? at::autocast::set_autocast_cpu_dtype(dtype)
                                 : at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

// -- the gradient scaler's fused kernels --------------------------------------------------------
// PyTorch's _amp_foreach_non_finite_check_and_unscale_: found_inf (a float
// tensor of one element) becomes 1 where a gradient holds an infinity or a NaN
// (checked before the division), and every gradient is multiplied by
// inv_scale. Where the device has no kernel (1.13 on the CPU) the same with
// tensor ops. Neither reads a value back to the host.
inline void amp_unscale_(std::vector<at::Tensor>& grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
#if !LT_TORCH_AT_LEAST(2, 3)
  if (!found_inf.is_cuda()) {
    for (auto& g : grads) {
      found_inf.copy_(at::maximum(found_inf, at::isfinite(g).all().logical_not().to(found_inf.scalar_type())));
      g.mul_(inv_scale);
    }
    return;
  }
#endif
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
}

// PyTorch's _amp_update_scale_: on found_inf the scale times backoff and the
// tracker 0; else the tracker counts, and at growth_interval the scale grows
// (unless that overflows float32) and the tracker restarts.
inline void amp_update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval) {
#if !LT_TORCH_AT_LEAST(2, 3)
  if (!scale.is_cuda()) {
    const at::Tensor found = found_inf.gt(0);
    const at::Tensor successful = growth_tracker + 1;
    const at::Tensor at_interval = successful.eq(growth_interval);
    const at::Tensor grown = (scale.to(at::kDouble) * growth_factor).to(scale.scalar_type());
    const at::Tensor backed_off = (scale.to(at::kDouble) * backoff_factor).to(scale.scalar_type());
    scale.copy_(at::where(found, backed_off, at::where(at_interval.logical_and(at::isfinite(grown)), grown, scale)));
    growth_tracker.copy_(at::where(found.logical_or(at_interval), at::zeros_like(successful), successful));
    return;
  }
#endif
  at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
}

// -- an accelerator's memory ------------------------------------------------------------------
// torch.cuda.memory_stats' aggregate byte counts of `device`'s caching
// allocator ("allocated_bytes.all.current", ...), its retries and OOMs, and
// the device's free and total memory ("memory_free_bytes",
// "memory_total_bytes"); empty on the CPU and where LibTorch has no
// device-generic allocator API.
inline std::map<std::string, double> accelerator_memory_stats(c10::Device device) {
  std::map<std::string, double> out;
#if LT_TORCH_AT_LEAST(2, 11)
  if (device.is_cpu() || !at::accelerator::isAccelerator(device.type())) return out;
  const c10::DeviceIndex index = device.has_index() ? device.index() : at::accelerator::getDeviceIndex();
  const auto stats = at::accelerator::getDeviceStats(index);
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const std::pair<const char*, const c10::CachingAllocator::StatArray*> arrays[] = {
      {"allocated_bytes", &stats.allocated_bytes},
      {"reserved_bytes", &stats.reserved_bytes},
      {"active_bytes", &stats.active_bytes},
      {"requested_bytes", &stats.requested_bytes}};
  for (const auto& [name, array] : arrays) {
    const auto& stat = (*array)[aggregate];
    out[std::string(name) + ".all.current"] = static_cast<double>(stat.current);
    out[std::string(name) + ".all.peak"] = static_cast<double>(stat.peak);
  }
  out["num_alloc_retries"] = static_cast<double>(stats.num_alloc_retries);
  out["num_ooms"] = static_cast<double>(stats.num_ooms);
  const auto [free_bytes, total_bytes] = at::accelerator::getMemoryInfo(index);
  out["memory_free_bytes"] = static_cast<double>(free_bytes);
  out["memory_total_bytes"] = static_cast<double>(total_bytes);
#else
  (void)device;
#endif
  return out;
}

// -- c10d -------------------------------------------------------------------------------------
// The process group around one backend (a ProcessGroupGloo or ProcessGroupNCCL
// made by the caller), as torch.distributed builds it: under 2.x a ProcessGroup
// whose default backend is this one (getBackendName() names it), registered for
// the device types the backend serves (Gloo: CPU and CUDA; NCCL: CUDA).
template <typename BackendImpl>
c10::intrusive_ptr<c10d::ProcessGroup> process_group_of(c10::intrusive_ptr<BackendImpl> backend,
                                                         const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                         int world_size, bool nccl) {
#if LT_TORCH_AT_LEAST(2, 0)
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  const auto type = nccl ? c10d::ProcessGroup::BackendType::NCCL : c10d::ProcessGroup::BackendType::GLOO;
  group->setDefaultBackend(type);
  backend->setSequenceNumberForGroup();
  if (!nccl) group->setBackend(c10::DeviceType::CPU, type, backend);
  group->setBackend(c10::DeviceType::CUDA, type, backend);
  return group;
#else
  (void)store, (void)rank, (void)world_size, (void)nccl;
  return backend;
#endif
}

// A c10d::Reducer (a template parameter, so that only its one user includes
// reducer.hpp). Which constructor the headers offer decides the call, so the
// 2.x releases between the tested ones take whichever they have.
template <typename Reducer>
std::shared_ptr<Reducer> make_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                                      std::vector<size_t> per_bucket_limits,
                                      c10::intrusive_ptr<c10d::ProcessGroup> group, std::vector<bool> expect_sparse,
                                      int64_t bucket_bytes_cap, bool find_unused, bool gradient_as_bucket_view,
                                      std::unordered_map<size_t, std::string> names, int64_t first_bucket_bytes) {
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<size_t, std::string>;
  if constexpr (std::is_constructible_v<Reducer, Params, Buckets, std::vector<size_t>, Group, std::vector<bool>,
                                        int64_t, bool, bool, Names, int64_t>) {  // 1.13
    return std::make_shared<Reducer>(std::move(params), std::move(buckets), std::move(per_bucket_limits),
                                     std::move(group), std::move(expect_sparse), bucket_bytes_cap, find_unused,
                                     gradient_as_bucket_view, std::move(names), first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<Reducer, Params, Buckets, Group, std::vector<bool>, int64_t, bool,
                                               bool, Names, int64_t, bool, bool, std::vector<int64_t>>) {  // 2.11
    // No skipped all-reduce of unused parameters, the C++ reducer, and
    // rebuilt buckets sized as the first ones (an empty cap list).
    return std::make_shared<Reducer>(std::move(params), std::move(buckets), std::move(group),
                                      std::move(expect_sparse), bucket_bytes_cap, find_unused,
                                      gradient_as_bucket_view, std::move(names), first_bucket_bytes, false, false,
                                      std::vector<int64_t>{});
  } else {
    return std::make_shared<Reducer>(std::move(params), std::move(buckets), std::move(group),
                                     std::move(expect_sparse), bucket_bytes_cap, find_unused,
                                     gradient_as_bucket_view, std::move(names), first_bucket_bytes, false, false);
  }
}

}  // namespace lt::compat
