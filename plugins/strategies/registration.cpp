// The strategies a config may name. Each strategy is added here, once, by an
// explicit call (no self-registering statics); register_builtins() in
// trainer/registry.cpp calls this function.
#include "plugins/strategies/strategy.h"
#include "trainer/registry.h"
#include "trainer/trainer_options.h"

namespace lt {

void register_builtin_strategies(Registry& registry) {
  registry.add<Strategy>(
      "single_device", "one process on one device",
      ArgSchema().add_string("device", std::nullopt, "torch device, e.g. cpu or cuda:0 (null: from trainer.accelerator)"),
      [](const InitArgs& args) {
        std::string device = args.get_optional_string("device").value_or("");
        if (device.empty()) {
          const std::string accelerator = args.trainer() ? args.trainer()->accelerator() : "cpu";
          const bool cuda = accelerator == "cuda" || (accelerator == "auto" && torch::cuda::is_available());
          device = cuda ? "cuda:0" : "cpu";
        }
        try {
          return std::make_shared<SingleDeviceStrategy>(torch::Device(device));
        } catch (const c10::Error&) {
          throw ValueError(c10::str("single_device: '", device, "' is not a torch device (e.g. cpu, cuda:0)"));
        }
      });
}

}  // namespace lt
