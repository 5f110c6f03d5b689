#pragma once
// Stand-in for a header some LibTorch packages leave out (Debian's
// libtorch-dev 1.13 ships c10d/reducer.hpp but not the distributed-autograd
// headers it includes). reducer.hpp needs exactly two names from it:
//   - DistAutogradContext::GradCallback, only inside a static_assert that it
//     is std::function<bool(at::Tensor&)>;
//   - ContextPtr, held by Reducer::RpcContext as a std::shared_ptr member.
// Both are declared here with PyTorch 1.13's definitions. A shared_ptr's
// layout does not depend on its element type, so Reducer's layout (compiled
// into libtorch_cpu.so) is unchanged; nothing here is ever defined or called.
//
// cmake/LightningCppDistributed.cmake puts this folder on the include path,
// ahead of the system headers, only when the real header is missing, and
// only for lightning-cpp's own sources (no public header includes reducer.hpp).

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
