#include <lightning_cpp/loops/registration.h>

#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/loops/fit_loop.h>

namespace lt {

void register_builtin_loops(Registry& r) {
  r.add<FitLoop>("FitLoop", "the default fit loop (epochs of training with validation)", ArgSchema(),
                 [](const InitArgs&) { return std::make_shared<FitLoop>(); });
}

}  // namespace lt
