#include <lightning_cpp/cli/cli.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/cli/internal/arguments.h>
#include <lightning_cpp/cli/internal/trainer_section.h>
#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/loops/fit_loop.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/strategies/registration.h>

namespace lt::cli {

namespace fs = std::filesystem;

using detail::check_keys;
using detail::fail;
using detail::join_path;
using detail::kSubcommands;
using detail::kTopLevelKeys;
using detail::lift_strategy_aliases;
using detail::lift_trainer_aliases;
using detail::parse_arg;
using detail::parse_bool;
using detail::resolve_args;
using detail::trainer_schema;
using detail::validate_trainer;
using detail::value_node;

namespace {

// -- classes ----------------------------------------------------------------------------

template <typename T>
std::string registered_name(const Registry& registry, const std::string& class_path) {
  if (registry.contains<T>(class_path)) return class_path;
  // Lightning-style dotted paths: "lightning.pytorch.callbacks.EarlyStopping".
  const auto dot = class_path.rfind('.');
  if (dot != std::string::npos && registry.contains<T>(class_path.substr(dot + 1))) return class_path.substr(dot + 1);
  return {};
}

// {class_path, init_args} (or a bare name) -> {class_path: <registered>, init_args: {every argument}}.
template <typename T>
ConfigNode resolve_class(const ConfigNode& node, const std::string& path, const Registry& registry) {
  const std::string kind = RegistryKind<T>::kName;
  const ConfigNode* class_path = nullptr;
  const ConfigNode* init_args = nullptr;
  if (node.is_scalar()) {
    class_path = &node;
  } else if (node.is_map()) {
    check_keys(node, path, {"class_path", "init_args"});
    class_path = node.find("class_path");
    init_args = node.find("init_args");
    if (class_path == nullptr) {
      fail(node.source, join_path(path, "class_path"),
           c10::str("missing; name the ", kind, " (registered ", plural(kind), ": ", c10::Join(", ", registry.names<T>()),
                    ")"));
    }
  } else {
    fail(node.source, path, c10::str("expected a ", kind, " name or {class_path, init_args}, got ", node.describe()));
  }
  const std::string cp_path = node.is_map() ? join_path(path, "class_path") : path;
  if (!class_path->is_scalar()) {
    fail(class_path->source, cp_path, c10::str("expected a ", kind, " name (a string), got ", class_path->describe()));
  }
  const std::string name = registered_name<T>(registry, class_path->value);
  if (name.empty()) {
    fail(class_path->source, cp_path, Registry::unknown_name_message(kind, class_path->value, registry.names<T>()));
  }
  const auto& entry = registry.get<T>(name);
  ConfigNode out = ConfigNode::map(node.source);
  out.key_source = node.key_source;
  ConfigNode cp = ConfigNode::scalar(name, class_path->source);
  out.set("class_path", cp);
  out.set("init_args", resolve_args(entry.schema, init_args, join_path(path, "init_args"), class_path->source));
  return out;
}

const ConfigSource& first_source(const ConfigNode& root) { return root.source; }

}  // namespace

// -- resolve -------------------------------------------------------------------------------

ConfigNode resolve_config(const ConfigNode& config, const Registry& registry, const std::string& subcommand) {
  LT_CHECK_VALUE(std::find(kSubcommands.begin(), kSubcommands.end(), subcommand) != kSubcommands.end(),
                 "unknown subcommand '", subcommand, "' (valid: fit, validate, test, predict)");
  ConfigNode root = config.is_null() ? ConfigNode::map(config.source) : config;
  if (!root.is_map()) fail(root.source, "config", c10::str("expected a mapping, got ", root.describe()));
  lift_trainer_aliases(root);
  check_keys(root, "", kTopLevelKeys);
  ConfigNode out = ConfigNode::map(root.source);

  // seed_everything: int, null or false.
  const ConfigNode* seed = root.find("seed_everything");
  if (seed != nullptr && seed->is_scalar() && !seed->quoted && parse_bool(seed->value) == false) seed = nullptr;
  {
    ArgSpec spec;
    spec.name = "seed_everything";
    spec.type = ArgType::kInt;
    spec.nullable = true;
    out.set("seed_everything", seed ? value_node(parse_arg(spec, *seed, "seed_everything"), seed->source)
                                    : ConfigNode::null());
  }

  const ConfigNode* trainer = root.find("trainer");
  ConfigNode resolved_trainer = resolve_args(trainer_schema(), trainer, "trainer", trainer ? trainer->source : root.source);
  validate_trainer(resolved_trainer);
  out.set("trainer", resolved_trainer);

  for (const auto& [key, kind] : {std::pair<std::string, std::string>{"model", "model"}, {"data", "data module"}}) {
    const ConfigNode* node = root.find(key);
    if (node == nullptr || node->is_null()) {
      const auto names = key == "model" ? registry.names<LightningModule>() : registry.names<DataModule>();
      fail(first_source(root), key,
           c10::str("missing; '", subcommand, "' needs a ", kind, ": {class_path: <name>, init_args: {...}} (registered ",
                    kind, "s: ", names.empty() ? std::string("none") : c10::Join(", ", names), ")"));
    }
    out.set(key, key == "model" ? resolve_class<LightningModule>(*node, key, registry)
                                : resolve_class<DataModule>(*node, key, registry));
  }

  ConfigNode callbacks = ConfigNode::list();
  if (const ConfigNode* node = root.find("callbacks"); node != nullptr && !node->is_null()) {
    if (!node->is_list()) {
      fail(node->source, "callbacks", c10::str("expected a list of {class_path, init_args}, got ", node->describe()));
    }
    callbacks.source = node->source;
    for (size_t i = 0; i < node->items.size(); ++i) {
      callbacks.items.push_back(resolve_class<Callback>(node->items[i], c10::str("callbacks[", i, "]"), registry));
    }
  }
  out.set("callbacks", callbacks);

  // logger: true/null -> CSVLogger and TensorBoardLogger, false -> none; one
  // logger or a list of them (a LoggerCollection).
  const ConfigNode* logger = root.find("logger");
  std::optional<bool> logger_flag;
  if (logger == nullptr || logger->is_null()) logger_flag = true;
  else if (logger->is_scalar() && !logger->quoted) logger_flag = parse_bool(logger->value);
  if (logger_flag == false) {
    out.set("logger", ConfigNode::scalar("false", logger->source));
  } else if (logger_flag == true) {
    ConfigNode defaults = ConfigNode::list(logger ? logger->source : ConfigSource{});
    for (const char* name : {"CSVLogger", "TensorBoardLogger"}) {
      defaults.items.push_back(resolve_class<Logger>(ConfigNode::scalar(name, defaults.source), "logger", registry));
    }
    out.set("logger", defaults);
  } else if (logger->is_list()) {
    if (logger->items.empty()) fail(logger->source, "logger", "an empty list; say false for no logger");
    ConfigNode list = ConfigNode::list(logger->source);
    for (size_t i = 0; i < logger->items.size(); ++i) {
      list.items.push_back(resolve_class<Logger>(logger->items[i], c10::str("logger[", i, "]"), registry));
    }
    out.set("logger", list);
  } else {
    out.set("logger", resolve_class<Logger>(*logger, "logger", registry));
  }

  // strategy: null or "auto" -> single_device, or ddp for more than one process
  // (devices * num_nodes > 1, or ranks started by torchrun, srun, mpirun).
  const ConfigNode* strategy = root.find("strategy");
  if (strategy == nullptr || strategy->is_null() || (strategy->is_scalar() && strategy->value == "auto")) {
    const ConfigNode& t = *out.find("trainer");
    const std::string picked = resolve_strategy_name("auto", std::stoll(t.find("devices")->value),
                                                     std::stoll(t.find("num_nodes")->value));
    ConfigNode name = ConfigNode::scalar(picked, strategy ? strategy->source : t.source);
    out.set("strategy", resolve_class<Strategy>(name, "strategy", registry));
  } else {
    out.set("strategy", resolve_class<Strategy>(*strategy, "strategy", registry));
  }

  lift_strategy_aliases(out, strategy);

  const ConfigNode* scheduler = root.find("lr_scheduler");
  out.set("lr_scheduler", scheduler == nullptr || scheduler->is_null()
                              ? ConfigNode::null()
                              : resolve_class<LRSchedulerSpec>(*scheduler, "lr_scheduler", registry));

  const ConfigNode* loop = root.find("fit_loop");
  out.set("fit_loop", resolve_class<FitLoop>(loop && !loop->is_null() ? *loop : ConfigNode::scalar("FitLoop"),
                                             "fit_loop", registry));

  const ConfigNode* ckpt = root.find("ckpt_path");
  if (ckpt == nullptr || ckpt->is_null()) {
    out.set("ckpt_path", ConfigNode::null());
  } else {
    if (!ckpt->is_scalar()) fail(ckpt->source, "ckpt_path", c10::str("expected a path (a string), got ", ckpt->describe()));
    const bool named = ckpt->value == "last" || ckpt->value == "best";
    if (!named && !fs::exists(ckpt->value)) {
      fail(ckpt->source, "ckpt_path", c10::str("'", ckpt->value, "' does not exist (or say last or best)"));
    }
    // Checked before anything is written: a corrupt file is bad input.
    if (!named) {
      try {
        check_checkpoint_file(ckpt->value);
      } catch (const ValueError& e) {
        fail(ckpt->source, "ckpt_path", e.what());
      }
    }
    out.set("ckpt_path", ConfigNode::scalar(ckpt->value, ckpt->source, true));
  }

  ConfigNode plugins = ConfigNode::list();
  for (const auto& p : registry.plugins()) plugins.items.push_back(ConfigNode::scalar(p, {}, true));
  out.set("plugins", plugins);
  return out;
}

}  // namespace lt::cli
