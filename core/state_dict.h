#pragma once
// The state-dict vocabulary every layer speaks: a module's tensors by their
// PyTorch names, the weights inside a loaded checkpoint, the tensors of a
// loaded list and the RNG's state. No file I/O here: reading and writing
// checkpoints is the strategy's CheckpointIO (core/checkpoint_plugin.h,
// plugins/io/).

#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

// Parameters and buffers by their dotted names, like nn.Module.state_dict().
c10::Dict<std::string, torch::Tensor> module_state_dict(const torch::nn::Module& module);
// Copies tensors into the module's parameters and buffers; strict: every name
// must match. A placeholder (core/deferred_tensor.h) is read from its source.
void load_module_state_dict(torch::nn::Module& module, const c10::Dict<std::string, torch::Tensor>& state,
                            bool strict = true);

// The {name -> tensor} dict inside `loaded` (a checkpoint, whose weights are
// under "state_dict", or a bare state_dict); `path` names it in errors.
c10::Dict<std::string, torch::Tensor> state_dict_from(const c10::IValue& loaded, const std::string& path);

// The tensors of a loaded list. A checkpoint holds plain pickle lists, as
// Python's torch.save writes them, so a list saved as a
// c10::List<torch::Tensor> reads back as a list of any type, which
// IValue::toTensorVector() refuses; this takes both.
std::vector<torch::Tensor> tensor_list(const c10::IValue& list);

// A checkpoint's "rng_states" (torch's CPU generator, which dropout and
// friends draw from: a resumed run continues its stream), and back.
StateDict rng_states();
void load_rng_states(const StateDict& states);

}  // namespace lt
