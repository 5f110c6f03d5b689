#include <lightning_cpp/cli/internal/trainer_section.h>

#include <regex>
#include <string>
#include <utility>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/cli/internal/arguments.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/plugins/strategies/registration.h>

namespace lt::cli::detail {

namespace {

#define LT_OPTION LT_OPTION_NONE
#define LT_OPTION_WITH LT_OPTION_NONE
#define LT_CPP_OPTION LT_OPTION_NONE
#define LT_OPTION_ALIAS LT_OPTION_ALIAS_ENTRY
// trainer.<name> for each of these is an alias of the top-level <key>: the LT_OPTION_ALIAS rows of
// core/trainer_options.def.
constexpr OptionAlias kTopLevelAliases[] = {
#include <lightning_cpp/core/trainer_options.def>
};
// trainer.<name> for each of these is an alias of the strategy's init_args.<name>: the LT_OPTION_ALIAS
// rows of the ddp strategy's table (plugins/strategies/parallel_options.def).
#define LT_OPTION_ALIAS LT_OPTION_ALIAS_ENTRY
constexpr OptionAlias kStrategyAliases[] = {
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
};
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION

}  // namespace

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
      for (const OptionAlias& entry : kStrategyAliases) {
        ArgSpec alias = *ddp_strategy_schema().find(entry.name);
        alias.default_value = std::monostate{};
        alias.nullable = true;
        alias.doc = c10::str("alias of strategy ddp's init_args.", entry.name);
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

// trainer.{seed,callbacks,logger,strategy} are accepted as aliases of the top-level keys.
void lift_trainer_aliases(ConfigNode& root) {
  for (const auto& [inner, outer] : kTopLevelAliases) {
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
  for (const OptionAlias& entry : kStrategyAliases) {
    const char* key = entry.name;
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

}  // namespace lt::cli::detail
