#include <lightning_cpp/cli/cli.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>

#include <CLI/CLI.hpp>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/profiler.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loops/fit_loop.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/strategies/registration.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt::cli {

namespace fs = std::filesystem;

namespace {

// trainer.<key> for each of these is an alias of the ddp strategy's init_args.<key>.
constexpr const char* kStrategyAliases[] = {"uneven_inputs", "join_enable", "join_throw_on_early_termination",
                                            "join_divide_by_initial_world_size"};

const std::vector<std::string> kTopLevelKeys = {"seed_everything", "trainer", "model",    "data",      "callbacks",
                                                "logger",          "strategy", "fit_loop", "ckpt_path", "plugins"};
const std::vector<std::string> kSubcommands = {"fit", "validate", "test", "predict"};

[[noreturn]] void fail(const ConfigSource& source, const std::string& path, const std::string& problem) {
  throw ValueError(c10::str(source.str(), ": ", path, ": ", problem));
}

std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string valid_keys_hint(const std::string& key, const std::vector<std::string>& valid) {
  std::string msg = "unknown key";
  const std::string guess = did_you_mean(key, valid);
  if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
  return msg + " (valid keys: " + c10::Join(", ", valid) + ")";
}

void check_keys(const ConfigNode& map, const std::string& path, const std::vector<std::string>& valid) {
  for (const auto& [key, value] : map.entries) {
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      fail(value.key_source, join_path(path, key), valid_keys_hint(key, valid));
    }
  }
}

// -- typed values ---------------------------------------------------------------------

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  static const std::regex kInt(R"(^[-+]?[0-9]+$)");
  if (!std::regex_match(s, kInt)) return std::nullopt;
  try {
    return std::stoll(s);
  } catch (const std::out_of_range&) {
    return std::nullopt;
  }
}

std::optional<double> parse_float(const std::string& s) {
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return INFINITY;
  if (s == "-.inf" || s == "-.Inf") return -INFINITY;
  if (s == ".nan" || s == ".NaN") return NAN;
  static const std::regex kFloat(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (!std::regex_match(s, kFloat)) return std::nullopt;
  return std::strtod(s.c_str(), nullptr);
}

ArgValue parse_arg(const ArgSpec& spec, const ConfigNode& node, const std::string& path) {
  auto expected = [&]() { fail(node.source, path, c10::str("expected ", arg_type_name(spec.type), ", got ", node.describe())); };
  if (node.is_null()) {
    if (spec.nullable) return std::monostate{};
    expected();
  }
  if (spec.type == ArgType::kStringList) {
    if (!node.is_list()) expected();
    std::vector<std::string> out;
    for (size_t i = 0; i < node.items.size(); ++i) {
      LT_CHECK_VALUE(node.items[i].is_scalar(), node.items[i].source.str(), ": ", path, "[", i,
                     "]: expected a string, got ", node.items[i].describe());
      out.push_back(node.items[i].value);
    }
    return out;
  }
  if (spec.type == ArgType::kIntMap) {
    if (!node.is_map()) expected();
    IntMap out;
    for (const auto& [key, value] : node.entries) {
      const auto k = parse_int(key);
      const auto v = value.is_scalar() && !value.quoted ? parse_int(value.value) : std::nullopt;
      LT_CHECK_VALUE(k && v, value.source.str(), ": ", path, ": expected integer keys and values, got ", key, ": ",
                     value.describe());
      out[*k] = *v;
    }
    return out;
  }
  if (!node.is_scalar()) expected();
  const std::string& s = node.value;
  switch (spec.type) {
    case ArgType::kBool:
      if (auto b = parse_bool(s); b && !node.quoted) return *b;
      break;
    case ArgType::kInt:
      if (auto i = parse_int(s); i && !node.quoted) return *i;
      break;
    case ArgType::kFloat:
      if (auto f = parse_float(s); f && !node.quoted) return *f;
      break;
    case ArgType::kIntOrFloat:
      if (node.quoted) break;
      if (auto i = parse_int(s)) return *i;
      if (auto f = parse_float(s)) return *f;
      break;
    case ArgType::kIntOrBool:
      if (node.quoted) break;
      if (auto i = parse_int(s)) return *i;
      if (auto b = parse_bool(s)) return int64_t{*b ? 1 : 0};
      break;
    case ArgType::kString:
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end()) {
        std::string msg = c10::str("expected one of ", c10::Join(", ", spec.choices), ", got '", s, "'");
        const std::string guess = did_you_mean(s, spec.choices);
        if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
        fail(node.source, path, msg);
      }
      return s;
    case ArgType::kStringList:
    case ArgType::kIntMap:
      break;
  }
  expected();
  return {};
}

ConfigNode value_node(const ArgValue& value, const ConfigSource& source) {
  if (std::holds_alternative<std::monostate>(value)) return ConfigNode::null(source);
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    ConfigNode out = ConfigNode::list(source);
    for (const auto& s : *list) out.items.push_back(ConfigNode::scalar(s, source, true));
    return out;
  }
  if (const auto* map = std::get_if<IntMap>(&value)) {
    ConfigNode out = ConfigNode::map(source);
    for (const auto& [k, v] : *map) out.set(std::to_string(k), ConfigNode::scalar(std::to_string(v), source));
    return out;
  }
  return ConfigNode::scalar(arg_value_str(value), source, std::holds_alternative<std::string>(value));
}

// Checks `node` (a map or null) against `schema`; returns every schema key in order.
ConfigNode resolve_args(const ArgSchema& schema, const ConfigNode* node, const std::string& path,
                        const ConfigSource& owner) {
  ConfigNode out = ConfigNode::map(node ? node->source : owner);
  if (node != nullptr && !node->is_null()) {
    if (!node->is_map()) fail(node->source, path, c10::str("expected a mapping of arguments, got ", node->describe()));
    check_keys(*node, path, schema.names());
  }
  for (const auto& spec : schema.specs()) {
    const ConfigNode* given = node != nullptr && node->is_map() ? node->find(spec.name) : nullptr;
    const std::string key_path = join_path(path, spec.name);
    if (given == nullptr) {
      if (spec.required) {
        fail(owner, key_path, c10::str("missing required argument (", arg_type_name(spec.type), "): ", spec.doc));
      }
      ConfigNode v = value_node(spec.default_value, owner);
      out.set(spec.name, v);
      continue;
    }
    ConfigNode v = value_node(parse_arg(spec, *given, key_path), given->source);
    v.key_source = given->key_source;
    out.set(spec.name, v);
  }
  return out;
}

InitArgs init_args_of(const ArgSchema& schema, const ConfigNode& resolved, const std::string& path,
                      const TrainerOptions* trainer) {
  std::map<std::string, ArgValue> values;
  for (const auto& spec : schema.specs()) {
    const ConfigNode* v = resolved.find(spec.name);
    LT_CHECK(v != nullptr, "resolved config lacks ", join_path(path, spec.name));
    values[spec.name] = parse_arg(spec, *v, join_path(path, spec.name));
  }
  return InitArgs(std::move(values), trainer, path);
}

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
           c10::str("missing; name the ", kind, " (registered ", kind == "strategy" ? std::string("strategies") : kind + "s",
                    ": ", c10::Join(", ", registry.names<T>()), ")"));
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

template <typename T>
std::shared_ptr<T> build_class(const ConfigNode& resolved, const std::string& path, const Registry& registry,
                               const TrainerOptions* trainer) {
  const ConfigNode& cp = *resolved.find("class_path");
  const auto& entry = registry.get<T>(cp.value);
  const std::string args_path = join_path(path, "init_args");
  InitArgs args = init_args_of(entry.schema, *resolved.find("init_args"), args_path, trainer);
  try {
    auto object = entry.factory(args);
    LT_CHECK(object != nullptr, "the factory of ", RegistryKind<T>::kName, " '", cp.value, "' returned null");
    return object;
  } catch (const ValueError& e) {
    // Name the class unless the message already starts with it.
    const std::string msg = e.what();
    fail(cp.source, args_path, msg.rfind(cp.value, 0) == 0 ? msg : c10::str(cp.value, ": ", msg));
  }
}

// -- trainer ----------------------------------------------------------------------------

const ArgSchema& trainer_schema() {
  static const ArgSchema schema = [] {
    ArgSchema table;
    {
      ArgSchema& schema = table;
      const TrainerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_OPTION_WITH LT_OPTION_WITH_SCHEMA
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/core/trainer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION
    }
    ArgSchema schema;
    for (const ArgSpec& spec : table.specs()) {
      schema.add(spec);
      if (spec.name != "num_nodes") continue;
      // Aliases of the ddp strategy's init_args (see lift_strategy_aliases): its rows, null unless given.
      for (const char* key : kStrategyAliases) {
        ArgSpec alias = *ddp_strategy_schema().find(key);
        alias.default_value = std::monostate{};
        alias.nullable = true;
        alias.doc = c10::str("alias of strategy ddp's init_args.", key);
        schema.add(std::move(alias));
      }
    }
    // The CLI's own: Lightning's Trainer adds a ModelCheckpoint (the C++ Trainer leaves it to the user).
    schema.add_bool("enable_checkpointing", true,
                    "add a ModelCheckpoint if none is configured (fit saves with it; ckpt_path best/last finds with it)");
    return schema;
  }();
  return schema;
}

TrainerOptions trainer_options_from(const InitArgs& args) {
  TrainerOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_OPTION_WITH LT_OPTION_WITH_READ
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/core/trainer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION
  return options;
}

// TrainerOptions::validate() names the key ("trainer.max_epochs must be ...");
// point at the line that set it.
void validate_trainer(const ConfigNode& resolved_trainer) {
  TrainerOptions o = trainer_options_from(init_args_of(trainer_schema(), resolved_trainer, "trainer", nullptr));
  try {
    o.validate();
  } catch (const ValueError& e) {
    static const std::regex kKey(R"(trainer\.([a-z_]+))");
    std::smatch m;
    const std::string msg = e.what();
    ConfigSource source = resolved_trainer.source;
    if (std::regex_search(msg, m, kKey)) {
      if (const ConfigNode* v = resolved_trainer.find(m[1])) source = v->source;
    }
    throw ValueError(c10::str(source.str(), ": ", msg));
  }
}

// trainer.{callbacks,logger,strategy,seed} are accepted as aliases of the top-level keys.
void lift_trainer_aliases(ConfigNode& root) {
  const std::pair<const char*, const char*> kAliases[] = {
      {"callbacks", "callbacks"}, {"logger", "logger"}, {"strategy", "strategy"}, {"seed", "seed_everything"}};
  for (const auto& [inner, outer] : kAliases) {
    // Found again each time: root.set() below may move the entries.
    ConfigNode* trainer = root.find("trainer");
    if (trainer == nullptr || !trainer->is_map()) return;
    ConfigNode* v = trainer->find(inner);
    if (v == nullptr) continue;
    if (const ConfigNode* top = root.find(outer)) {
      fail(v->key_source, c10::str("trainer.", inner),
           c10::str("given twice: here and as top-level '", outer, "' (", top->key_source.str(), "); keep one"));
    }
    ConfigNode moved = *v;
    trainer->erase(inner);
    root.set(outer, std::move(moved));
  }
}

// trainer.uneven_inputs and trainer.join_* are aliases of the strategy's
// init_args of the same name (settings the ddp strategy owns): a value given
// in the trainer section moves there, and the trainer's key becomes null; a
// strategy without that argument (single_device) ignores it.
void lift_strategy_aliases(ConfigNode& out, const ConfigNode* strategy_given) {
  const ConfigNode* given_args =
      strategy_given != nullptr && strategy_given->is_map() ? strategy_given->find("init_args") : nullptr;
  ConfigNode* trainer = out.find("trainer");
  ConfigNode* init_args = out.find("strategy")->find("init_args");
  for (const char* key : kStrategyAliases) {
    ConfigNode* alias = trainer->find(key);
    if (alias == nullptr || alias->is_null()) continue;
    ConfigNode* target = init_args != nullptr ? init_args->find(key) : nullptr;
    if (target != nullptr) {
      const ConfigNode* given = given_args != nullptr && given_args->is_map() ? given_args->find(key) : nullptr;
      if (given != nullptr) {
        fail(alias->key_source, c10::str("trainer.", key),
             c10::str("given twice: here and as strategy.init_args.", key, " (", given->key_source.str(),
                      "); keep one"));
      }
      const ConfigSource key_source = target->key_source;
      *target = *alias;
      target->key_source = key_source;
    }
    const ConfigSource key_source = alias->key_source;
    *alias = ConfigNode::null(alias->source);
    alias->key_source = key_source;
  }
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

// -- build ---------------------------------------------------------------------------------

namespace {
// Lightning's SaveConfigCallback: the resolved config beside the run's logs.
class SaveConfigCallback : public Callback {
 public:
  explicit SaveConfigCallback(std::string yaml) : yaml_(std::move(yaml)) {}
  std::string name() const override { return "SaveConfigCallback"; }
  void setup(Trainer& trainer, LightningModule&, Stage stage) override {
    // fast_dev_run writes nothing (Lightning's suppressed logging).
    if (stage != Stage::kTrain || !trainer.is_global_zero() || trainer.options().fast_dev_run() > 0) return;
    fs::create_directories(trainer.log_dir());
    replace_file((fs::path(trainer.log_dir()) / "config.yaml").string(), yaml_);
  }

 private:
  std::string yaml_;
};
}  // namespace

RunObjects build_run(const ConfigNode& resolved, const Registry& registry, const std::string& subcommand) {
  RunObjects run;
  const ConfigNode& t = *resolved.find("trainer");
  const InitArgs trainer_args = init_args_of(trainer_schema(), t, "trainer", nullptr);
  run.trainer = trainer_options_from(trainer_args);
  if (const ConfigNode& seed = *resolved.find("seed_everything"); seed.is_scalar()) {
    run.trainer.seed(static_cast<uint64_t>(std::stoll(seed.value)));
  }
  // As LightningCLI: seed before the model is built, so its initial weights are reproducible.
  if (run.trainer.seed()) seed_everything(*run.trainer.seed());

  std::vector<std::shared_ptr<Callback>> callbacks;
  const ConfigNode& cbs = *resolved.find("callbacks");
  bool has_checkpoint = false;
  for (size_t i = 0; i < cbs.items.size(); ++i) {
    auto cb = build_class<Callback>(cbs.items[i], c10::str("callbacks[", i, "]"), registry, &run.trainer);
    has_checkpoint |= dynamic_cast<ModelCheckpoint*>(cb.get()) != nullptr;
    callbacks.push_back(std::move(cb));
  }
  // In every subcommand, as Lightning's Trainer adds it: validate, test and
  // predict find ckpt_path best and last through it.
  if (trainer_args.get_bool("enable_checkpointing") && !has_checkpoint) {
    callbacks.push_back(std::make_shared<ModelCheckpoint>());
  }
  if (subcommand == "fit") callbacks.push_back(std::make_shared<SaveConfigCallback>(to_yaml(resolved)));
  run.trainer.callbacks(std::move(callbacks));

  const ConfigNode& logger = *resolved.find("logger");
  if (logger.is_scalar()) run.trainer.default_logger(false);  // logger: false
  if (logger.is_map()) run.trainer.logger(build_class<Logger>(logger, "logger", registry, &run.trainer));
  if (logger.is_list()) {
    std::vector<std::shared_ptr<Logger>> loggers;
    for (size_t i = 0; i < logger.items.size(); ++i) {
      loggers.push_back(build_class<Logger>(logger.items[i], c10::str("logger[", i, "]"), registry, &run.trainer));
    }
    run.trainer.logger(std::make_shared<LoggerCollection>(std::move(loggers)));
  }
  run.trainer.strategy(build_class<Strategy>(*resolved.find("strategy"), "strategy", registry, &run.trainer));
  run.fit_loop = build_class<FitLoop>(*resolved.find("fit_loop"), "fit_loop", registry, &run.trainer);
  run.model = build_class<LightningModule>(*resolved.find("model"), "model", registry, &run.trainer);
  run.data = build_class<DataModule>(*resolved.find("data"), "data", registry, &run.trainer);
  const ConfigNode& ckpt = *resolved.find("ckpt_path");
  if (ckpt.is_scalar()) run.ckpt_path = ckpt.value;
  return run;
}

// -- the command -----------------------------------------------------------------------------

namespace {

std::string usage_footer(const Registry& registry) {
  return "\nConfig keys: seed_everything, trainer, model, data, callbacks, logger, strategy, fit_loop, ckpt_path, "
         "plugins.\nOverride any key with --key.path=value, e.g. --trainer.max_epochs=3 "
         "--model.init_args.hidden=128.\n\nRegistered (load more with --plugin path/to/lib.so):\n" +
         registry.describe();
}

// --plugin is read before anything else so that --help lists what plugins register.
std::vector<std::string> plugin_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plugin" && i + 1 < args.size()) out.push_back(args[++i]);
    else if (args[i].rfind("--plugin=", 0) == 0) out.push_back(args[i].substr(9));
  }
  return out;
}

void print_metrics(std::ostream& out, const std::string& title, const std::map<std::string, double>& metrics) {
  out << title << "\n";
  for (const auto& [k, v] : metrics) out << "  " << k << ": " << v << "\n";
}

int execute(const std::string& subcommand, const std::vector<std::string>& configs,
            const std::vector<std::string>& extras, const std::vector<std::string>& plugins, bool print_config,
            Registry& registry, std::ostream& out) {
  ConfigNode root = ConfigNode::map();
  for (const auto& path : configs) {
    ConfigNode file = load_config_file(path);
    if (root.entries.empty()) root.source = file.source;
    merge_config(root, file);
  }
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    LT_CHECK_VALUE(arg.rfind("--", 0) == 0 && arg.size() > 2, "command line '", arg,
                   "': unexpected argument (overrides look like --trainer.max_epochs=3)");
    std::string key = arg.substr(2), value;
    std::string shown = arg;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      LT_CHECK_VALUE(i + 1 < extras.size() && extras[i + 1].rfind("--", 0) != 0, "command line '", arg,
                     "': missing value (use ", arg, "=<value>)");
      value = extras[++i];
      shown = arg + "=" + value;
    }
    const std::string top = key.substr(0, key.find('.'));
    if (std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), top) == kTopLevelKeys.end()) {
      throw ValueError(c10::str("command line '", shown, "': ", valid_keys_hint(top, kTopLevelKeys)));
    }
    apply_override(root, key, value, shown);
  }
  // Plugins named in the configs, then on the command line.
  if (const ConfigNode* p = root.find("plugins"); p != nullptr && !p->is_null()) {
    if (!p->is_list()) fail(p->source, "plugins", c10::str("expected a list of paths, got ", p->describe()));
    for (size_t i = 0; i < p->items.size(); ++i) {
      const ConfigNode& item = p->items[i];
      if (!item.is_scalar()) fail(item.source, c10::str("plugins[", i, "]"), "expected a path, got " + item.describe());
      try {
        registry.load_plugin(item.value);
      } catch (const ValueError& e) {
        fail(item.source, c10::str("plugins[", i, "]"), e.what());
      }
    }
  }
  for (const auto& path : plugins) registry.load_plugin(path);

  const ConfigNode resolved = resolve_config(root, registry, subcommand);
  if (print_config) {
    out << to_yaml(resolved);
    return kExitOk;
  }
  RunObjects run = build_run(resolved, registry, subcommand);
  Trainer trainer(run.trainer);
  trainer.set_fit_loop(run.fit_loop);
  if (subcommand == "fit") {
    trainer.fit(run.model, run.data, run.ckpt_path);
    return kExitOk;
  }
  if (subcommand == "validate") {
    auto metrics = trainer.validate(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) print_metrics(out, "Validation metrics:", metrics);
  } else if (subcommand == "test") {
    auto metrics = trainer.test(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) print_metrics(out, "Test metrics:", metrics);
  } else {
    auto predictions = trainer.predict(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) {
      fs::create_directories(trainer.log_dir());
      const std::string path = (fs::path(trainer.log_dir()) / "predictions.pt").string();
      c10::List<torch::Tensor> list;
      for (const auto& p : predictions) list.push_back(p.cpu());
      atomic_pickle_save(list, path);
      out << "Wrote " << predictions.size() << " prediction batches to " << path << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

int run(const std::vector<std::string>& args, Registry& registry, std::ostream& out, std::ostream& err,
        const std::string& program) {
  try {
    for (const auto& path : plugin_args(args)) registry.load_plugin(path);
  } catch (const ValueError& e) {
    err << "error: " << e.what() << "\n";
    return kExitConfigError;
  }

  CLI::App app{program + ": train, validate, test or predict from YAML configs", program};
  app.require_subcommand(1);
  app.footer(usage_footer(registry));
  std::vector<std::string> top_plugins;
  app.add_option("--plugin", top_plugins, "load a plugin shared library by path (repeatable)");
  struct Sub {
    CLI::App* app;
    std::vector<std::string> configs, plugins;
    bool print_config = false;
  };
  std::vector<Sub> subs(kSubcommands.size());
  const std::map<std::string, std::string> docs = {{"fit", "train the model (resume with ckpt_path)"},
                                                    {"validate", "run one validation epoch"},
                                                    {"test", "run the test set"},
                                                    {"predict", "predict and save <log_dir>/predictions.pt"}};
  for (size_t i = 0; i < kSubcommands.size(); ++i) {
    Sub& s = subs[i];
    s.app = app.add_subcommand(kSubcommands[i], docs.at(kSubcommands[i]));
    s.app->add_option("-c,--config", s.configs, "a YAML config; repeatable, later files override earlier ones");
    s.app->add_flag("--print_config", s.print_config, "print the fully resolved config and exit");
    s.app->add_option("--plugin", s.plugins, "load a plugin shared library by path (repeatable)");
    s.app->allow_extras();
    s.app->footer(usage_footer(registry));
  }

  std::vector<const char*> argv{program.c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitConfigError;
  }

  for (const Sub& s : subs) {
    if (!s.app->parsed()) continue;
    // Exit 2 says nothing happened: an input error found after the run wrote
    // a file (a monitored key never logged, found at the first checkpoint)
    // is a failure of the run (1), with the same message.
    const int64_t written_before = files_written();
    const auto input_error = [&] { return files_written() == written_before ? kExitConfigError : kExitFailure; };
    try {
      return execute(s.app->get_name(), s.configs, s.app->remaining(), s.plugins, s.print_config, registry, out);
    } catch (const Interrupted& e) {
      // Stopped on request: not a failure. Rank 0 says how to resume.
      err << program << ": " << e.what() << "\n";
      if (!e.checkpoint().empty() && rank_zero_env_rank() == 0) {
        err << program << ": to resume: " << program << " " << s.app->get_name();
        for (const auto& config : s.configs) err << " -c " << config;
        for (const auto& extra : s.app->remaining()) {
          if (extra.rfind("--ckpt_path", 0) != 0) err << " " << extra;
        }
        err << " --ckpt_path=" << e.checkpoint() << "\n";
      }
      return kExitStoppedOnRequest;
    } catch (const JoinCompatibilityError& e) {
      // Every rank refuses alike before the first step: where each rank
      // prints its own error, rank 0 prints the list and the others a line.
      std::optional<std::string> printed;
      if (rank_zero_env_rank() != 0) {
        printed = c10::str("rank ", rank_zero_env_rank(), ": the run was refused before the first step (rank 0 ",
                           "printed why)");
      }
      report_failure(err, e.what(), printed);
      return input_error();
    } catch (const ValueError& e) {
      report_failure(err, e.what());
      return input_error();
    } catch (const std::exception& e) {
      report_failure(err, error_message(e));
      return kExitFailure;
    }
  }
  return kExitConfigError;
}

int main(int argc, char** argv, Registry& registry) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string program = argc > 0 ? fs::path(argv[0]).filename().string() : "lightning-cpp";
  return run(args, registry, std::cout, std::cerr, program);
}

}  // namespace lt::cli
