#pragma once
// A walk over a pickle's opcodes (internal to plugins/io), for what LibTorch's
// unpickler does not take from a pickle Python's torch.save wrote.

#include <string>

#include <ATen/core/ivalue.h>

namespace lt::detail {

// Rewrites what Python's torch.save writes for the collections.OrderedDict of
// module.state_dict() into what LibTorch's unpickler reads:
//   - `OrderedDict()` (the class called with no arguments, its entries set
//     after) becomes an empty dict (LibTorch's unpickler makes it None, then
//     fails on its entries);
//   - each BUILD (an object's state: the state_dict's `_metadata`, module
//     versions) sets that state under kBuildStateKey instead (MARK, the key,
//     the state, SETITEMS), which drop_build_states() then removes from what
//     was read.
// Returns whether it changed anything; a pickle it cannot follow (an opcode
// outside protocol 2's, a truncated argument) is left as it is.
bool adapt_python_pickle(std::string& pickle);

inline constexpr const char* kBuildStateKey = "\x01lightning_cpp: BUILD state";

// Removes kBuildStateKey's entries from every dict in `value`.
void drop_build_states(const c10::IValue& value);

}  // namespace lt::detail
