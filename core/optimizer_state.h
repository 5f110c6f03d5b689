#pragma once
// An optimizer's state in a checkpoint, as PyTorch's optimizer.state_dict()
// lays it out, so that Python's torch.optim reads it (load_state_dict) and a
// checkpoint holds the optimizer's tensors themselves, not a serialized copy:
//   {"state": {index: {"step": int, "exp_avg": tensor, ...}},
//    "param_groups": [{"lr": float, "betas": (float, float), ..., "params": [index, ...]}]}
// The index counts the parameters over the groups in order, as PyTorch's.
// Names per optimizer (PyTorch's): SGD momentum_buffer; Adam and AdamW step,
// exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad); RMSprop step, square_avg,
// momentum_buffer, grad_avg; Adagrad step, sum; and their options.
// Any other optimizer (LBFGS, a user's own) is kept as LibTorch's archive,
// a uint8 tensor, which is also what checkpoints before this layout hold.

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

namespace lt {

// The state of `optimizer`: PyTorch's layout, or LibTorch's archive bytes.
// The tensors are the optimizer's own (no copy): write it before the next step.
c10::IValue optimizer_state_dict(torch::optim::Optimizer& optimizer);

// Loads what optimizer_state_dict (or Python's optimizer.state_dict(), or a
// checkpoint before this layout) holds. A mismatch (groups, parameters,
// shapes, another optimizer's names) is a ValueError naming `where` (e.g.
// "checkpoint 'last.ckpt': optimizer") and the entry; the optimizer is as it
// was then. The optimizer's state is a copy of the given tensors (a loaded
// checkpoint's are views of its mapped file, which would otherwise stay
// mapped, and a replaced file's disk space in use, for as long as the run);
// copy false keeps the given tensors where dtype and device fit (a caller
// that copies what it keeps of a temporary optimizer).
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& state, const std::string& where,
                               bool copy = true);

// Optimizer state as bytes (LibTorch's archive format) and back: what a
// checkpoint keeps for an optimizer PyTorch's layout does not name.
torch::Tensor optimizer_to_bytes(torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes);

// The key of a parameter's state in LibTorch's optimizer.state(): the
// parameter's TensorImpl, as a string under LibTorch 1.13, as a pointer under 2.x.
using OptimizerStateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const torch::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // c10::guts::to_string, which 1.13 used
    key << parameter.unsafeGetTensorImpl();
    return key.str();
  } else {
    return parameter.unsafeGetTensorImpl();
  }
}

}  // namespace lt
