#pragma once
// The built-in strategies a config may name: "single_device" and "ddp".

namespace lt {

class Registry;

void register_builtin_strategies(Registry& registry);

}  // namespace lt
