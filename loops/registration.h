#pragma once
// The built-in loops a config may name.

namespace lt {

class Registry;

void register_builtin_loops(Registry& registry);

}  // namespace lt
