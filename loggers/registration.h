#pragma once
// The built-in loggers a config may name; schema defaults come from each
// logger's default-constructed Options.

namespace lt {

class Registry;

void register_builtin_loggers(Registry& registry);

}  // namespace lt
