#include <lightning_cpp/cli/register_builtins.h>

#include <lightning_cpp/callbacks/registration.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/loggers/registration.h>
#include <lightning_cpp/loops/registration.h>
#include <lightning_cpp/plugins/strategies/registration.h>
#include <lightning_cpp/tuner/registration.h>

namespace lt {

void register_builtins(Registry& registry) {
  register_builtin_strategies(registry);
  register_builtin_callbacks(registry);
  register_builtin_loggers(registry);
  register_builtin_loops(registry);
  register_builtin_lr_schedulers(registry);
  register_tuner_callbacks(registry);
}

Registry& Registry::global() {
  static Registry* registry = [] {
    auto* r = new Registry();  // never destroyed: plugins' factories live as long as the process
    register_builtins(*r);
    return r;
  }();
  return *registry;
}

}  // namespace lt
