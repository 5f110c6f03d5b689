#include <lightning_cpp/plugins/strategies/registration.h>

#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>
#include <lightning_cpp/plugins/strategies/single_device.h>

namespace lt {

void register_builtin_strategies(Registry& registry) {
  registry.add<Strategy>(
      "single_device", "one process on one device",
      ArgSchema().add_string("device", std::nullopt, "torch device, e.g. cpu or cuda:0 (null: from trainer.accelerator)"),
      [](const InitArgs& args) {
        std::string device = args.get_optional_string("device").value_or("");
        if (device.empty()) {
          const bool cuda = args.trainer() != nullptr && args.trainer()->device_type() == torch::kCUDA;
          device = cuda ? "cuda:0" : "cpu";
        }
        try {
          return std::make_shared<SingleDeviceStrategy>(torch::Device(device));
        } catch (const c10::Error&) {
          throw ValueError(c10::str("single_device: '", device, "' is not a torch device (e.g. cpu, cuda:0)"));
        }
      });
  registry.add<Strategy>(
      "ddp", "data parallel: one process per device (trainer.devices x num_nodes), gradients averaged by c10d",
      ddp_strategy_schema(), [](const InitArgs& args) {
        DDPStrategyOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
#undef LT_OPTION
        return std::make_shared<DDPStrategy>(options);
      });
  registry.add<Strategy>(
      "fsdp",
      "sharded data parallel: gradients and optimizer state sharded over the ranks (sharding_strategy), lockstep Join",
      [] {
        ArgSchema schema;
        const FSDPStrategyOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        FSDPStrategyOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/plugins/strategies/fsdp/fsdp_options.def>
#undef LT_OPTION
        return std::make_shared<FSDPStrategy>(options);
      });
}

const ArgSchema& ddp_strategy_schema() {
  static const ArgSchema schema = [] {
    ArgSchema schema;
    const DDPStrategyOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
#undef LT_OPTION
    return schema;
  }();
  return schema;
}

std::string resolve_strategy_name(const std::string& name, int64_t devices, int64_t num_nodes) {
  if (!name.empty() && name != "auto") return name;
  if (devices * num_nodes > 1) return "ddp";
  if (const int64_t started = external_world_size(); started > 1) {
    rank_zero_info(program_name(), ": no strategy given and the environment has ", started,
                   " ranks: training with strategy ddp");
    return "ddp";
  }
  return "single_device";
}

std::shared_ptr<Strategy> make_strategy(const TrainerOptions& options) {
  const std::string name = resolve_strategy_name(options.strategy_name(), options.devices(), options.num_nodes());
  const auto& entry = Registry::global().get<Strategy>(name);
  return entry.factory(default_init_args(entry.schema, &options));
}

}  // namespace lt
