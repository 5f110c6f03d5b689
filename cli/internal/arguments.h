#pragma once
// Internal to the CLI (cli/*.cpp), not part of cli.h: the config's top-level
// shape, errors that name where a value came from and its key path, and config
// values read as the types of a registered class's ArgSchema.

#include <optional>
#include <string>
#include <vector>

#include <lightning_cpp/cli/config.h>
#include <lightning_cpp/core/registry.h>

namespace lt::cli::detail {

// The config's top-level keys, and the subcommands that read a config.
inline const std::vector<std::string> kTopLevelKeys = {"seed_everything", "trainer",  "model",     "data",
                                                       "callbacks",       "logger",   "strategy",  "fit_loop",
                                                       "ckpt_path",       "plugins",  "lr_scheduler"};
inline const std::vector<std::string> kSubcommands = {"fit", "validate", "test", "predict"};

// Throws lt::ValueError "<source>: <path>: <problem>".
[[noreturn]] void fail(const ConfigSource& source, const std::string& path, const std::string& problem);
std::string join_path(const std::string& a, const std::string& b);
// "unknown key; did you mean '...'? (valid keys: ...)".
std::string valid_keys_hint(const std::string& key, const std::vector<std::string>& valid);
// Fails at the first key of `map` that is not in `valid`.
void check_keys(const ConfigNode& map, const std::string& path, const std::vector<std::string>& valid);

// -- typed values ---------------------------------------------------------------------

// YAML's true/false spellings; nullopt for anything else.
std::optional<bool> parse_bool(const std::string& s);
// `node` as a value of `spec`'s type; fails with what was expected and what was given.
ArgValue parse_arg(const ArgSpec& spec, const ConfigNode& node, const std::string& path);
ConfigNode value_node(const ArgValue& value, const ConfigSource& source);
// Checks `node` (a map or null) against `schema`; returns every schema key in order.
ConfigNode resolve_args(const ArgSchema& schema, const ConfigNode* node, const std::string& path,
                        const ConfigSource& owner);
// The arguments of a map resolve_args returned, for a factory.
InitArgs init_args_of(const ArgSchema& schema, const ConfigNode& resolved, const std::string& path,
                      const TrainerOptions* trainer);

}  // namespace lt::cli::detail
