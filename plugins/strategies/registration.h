#pragma once
// The built-in strategies a config may name: "single_device" and "ddp"; and
// the one place that picks a run's strategy when none is given as an object.

#include <cstdint>
#include <memory>
#include <string>

namespace lt {

class ArgSchema;
class Registry;
class Strategy;
struct TrainerOptions;

void register_builtin_strategies(Registry& registry);

// The ddp strategy's YAML init args (ddp/ddp_options.def): the CLI's
// trainer.uneven_inputs and trainer.join_* aliases are its rows.
const ArgSchema& ddp_strategy_schema();

// `name`, or for "auto" (and ""): ddp when devices * num_nodes > 1 or the
// environment started several ranks (torchrun, srun, mpirun: said once on
// rank 0), else single_device.
std::string resolve_strategy_name(const std::string& name, int64_t devices, int64_t num_nodes);

// The strategy options.strategy_name() resolves to, made by the global
// registry with its default init args (an unknown name: lt::ValueError
// listing the registered ones).
std::shared_ptr<Strategy> make_strategy(const TrainerOptions& options);

}  // namespace lt
