#pragma once
// FSDPUnit: declares a unit of sharded training (strategy fsdp) in a model.
// C++ modules call their submodules through the members that hold them, so
// the strategy cannot hook a submodule's forward as PyTorch's FSDP wraps one:
// a model declares its units, as it declares lt::SyncBatchNorm.
//
//   struct Net : torch::nn::Module {
//     Net() {
//       for (int i = 0; i < 8; ++i) blocks.push_back(register_module("block" + std::to_string(i),
//                                                                    lt::FSDPUnit<Block>(1024)));
//     }
//     torch::Tensor forward(torch::Tensor x) {
//       for (auto& block : blocks) x = block(x);
//       return x;
//     }
//     std::vector<lt::FSDPUnit<Block>> blocks;
//   };
//
// FSDPUnit<Inner>(args...) makes Inner(args...) (a module holder such as
// torch::nn::Linear or the model's own TORCH_MODULE) and registers Inner's
// parameters, buffers and submodules as its own: the state_dict keys are those
// of the model without the wrapper ("block0.fc.weight"), so checkpoints move
// between models with and without units, and between strategies.
//
// Under fsdp each unit's parameters are one flat buffer sharded over the ranks
// (fsdp/flat_shard.h). Under FULL_SHARD the unit's parameters are gathered
// when its forward starts, freed when it ends, gathered again when the
// gradient of its output arrives in backward, and freed once their
// gradients are reduce-scattered. Without the fsdp strategy (one process,
// ddp) forward is Inner's forward and nothing else.
//
// forward(args...) returns what Inner's forward returns. A unit whose output
// is not a tensor, a vector or a tuple of tensors cannot be found again in
// backward: it stays gathered from its forward to its gradients' reduction.

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace lt {

class FSDPUnitBase;

// What the fsdp strategy does around a unit's forward (FlatShard).
class FSDPUnitHooks {
 public:
  virtual ~FSDPUnitHooks() = default;
  virtual void enter(FSDPUnitBase& unit) = 0;
  // `outputs`: the forward's tensors (none when the output is of another type).
  virtual void leave(FSDPUnitBase& unit, const std::vector<torch::Tensor>& outputs) = 0;
};

class FSDPUnitBase {
 public:
  virtual ~FSDPUnitBase() = default;
  // Set by the fsdp strategy for a run (null: forward is Inner's alone).
  void set_unit_hooks(FSDPUnitHooks* hooks) { hooks_ = hooks; }

 protected:
  FSDPUnitHooks* hooks_ = nullptr;
};

namespace detail {
inline void collect_tensors(const torch::Tensor& t, std::vector<torch::Tensor>& out) { out.push_back(t); }
inline void collect_tensors(const std::vector<torch::Tensor>& ts, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& tuple, std::vector<torch::Tensor>& out) {
  std::apply([&](const auto&... item) { (collect_tensors(item, out), ...); }, tuple);
}
template <typename T>
void collect_tensors(const T& /*other*/, std::vector<torch::Tensor>& /*out*/) {}
}  // namespace detail

template <typename Inner>
class FSDPUnitImpl : public torch::nn::Module, public FSDPUnitBase {
 public:
  template <typename... Args>
  explicit FSDPUnitImpl(Args&&... args) : module(std::forward<Args>(args)...) {
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      register_parameter(item.key(), item.value(), item.value().requires_grad());
    }
    for (const auto& item : module->named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
    for (const auto& item : module->named_children()) register_module(item.key(), item.value());
  }

  template <typename... Args>
  auto forward(Args&&... args) {
    if (hooks_ == nullptr) return module->forward(std::forward<Args>(args)...);
    hooks_->enter(*this);
    auto output = module->forward(std::forward<Args>(args)...);
    std::vector<torch::Tensor> tensors;
    detail::collect_tensors(output, tensors);
    hooks_->leave(*this, tensors);
    return output;
  }

  // Inner is not a registered child (its parts are): keep its own flag in step.
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    module->train(on);
  }
  void pretty_print(std::ostream& stream) const override {
    stream << "lt::FSDPUnit(";
    module->pretty_print(stream);
    stream << ")";
  }

  Inner module;
};

// The holder, as TORCH_MODULE makes one for a module that is not a template.
// (ModuleHolder's own operator() cannot see a template forward.)
template <typename Inner>
class FSDPUnit : public torch::nn::ModuleHolder<FSDPUnitImpl<Inner>> {
 public:
  using torch::nn::ModuleHolder<FSDPUnitImpl<Inner>>::ModuleHolder;
  template <typename... Args>
  auto operator()(Args&&... args) {
    return this->get()->forward(std::forward<Args>(args)...);
  }
};

}  // namespace lt
