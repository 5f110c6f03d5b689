#pragma once
// The built-in callbacks a config may name; schema defaults come from each
// callback's default-constructed Options.

namespace lt {

class Registry;

void register_builtin_callbacks(Registry& registry);

}  // namespace lt
