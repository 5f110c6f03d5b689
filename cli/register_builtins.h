#pragma once
// register_builtins(): every area's built-ins, in one call. The one place
// that knows all areas, so it stands at the top with the CLI that names them.

namespace lt {

class Registry;

// Strategies, loops, loggers and callbacks (each area's registration.cpp).
void register_builtins(Registry& registry);

}  // namespace lt
