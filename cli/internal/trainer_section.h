#pragma once
// Internal to the CLI (cli/*.cpp), not part of cli.h: the config's trainer
// section. Its schema is TrainerOptions' table (core/trainer_options.def) plus
// the ddp strategy aliases and the CLI's own enable_checkpointing.

#include <lightning_cpp/cli/config.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>

namespace lt::cli::detail {

const ArgSchema& trainer_schema();
TrainerOptions trainer_options_from(const InitArgs& args);
// TrainerOptions::validate(), its error at the line that set the key.
void validate_trainer(const ConfigNode& resolved_trainer);
// Moves trainer.{seed,callbacks,logger,strategy} to the top level (the LT_OPTION_ALIAS rows of
// core/trainer_options.def).
void lift_trainer_aliases(ConfigNode& root);
// Moves trainer.uneven_inputs and trainer.join_* to the resolved strategy's init_args (the
// LT_OPTION_ALIAS rows of plugins/strategies/parallel_options.def).
void lift_strategy_aliases(ConfigNode& out, const ConfigNode* strategy_given);

}  // namespace lt::cli::detail
