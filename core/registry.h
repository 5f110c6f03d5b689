#pragma once
// lt::Registry: what a YAML config may name. Models, data modules, callbacks,
// loggers, strategies and loops register under a name with a one-line doc, a
// typed init-args schema (with defaults) and a factory:
//
//   registry.add<LightningModule>("MlpClassifier", "an MLP for 28x28 images",
//       ArgSchema().add_int("hidden", 256, "hidden width").add_float("lr", 1e-3, "Adam learning rate"),
//       [](const InitArgs& a) { return std::make_shared<Mlp>(a.get_int("hidden"), a.get_float("lr")); });
//
// There are no self-registering static objects (a static library drops them
// silently). Each area registers its built-ins in its own registration.cpp
// (register_builtin_callbacks, ..._loggers, ..._loops, ..._strategies); one
// function calls them all: register_builtins() (cli/register_builtins.h),
// which Registry::global() runs once. A user's shared library exports
// lightning_cpp_plugin_info() (see PluginInfo below) and is loaded by an
// explicit path with load_plugin().

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <lightning_cpp/core/check.h>

namespace lt {

class LightningModule;
class DataModule;
class Callback;
class Logger;
class Strategy;
class FitLoop;
struct LRSchedulerSpec;
struct TrainerOptions;

// -- init-args schema -----------------------------------------------------------

enum class ArgType { kBool, kInt, kFloat, kString, kIntOrFloat, kIntOrBool, kStringList, kIntMap };
const char* arg_type_name(ArgType type);  // "an integer", "a float", ...

// A value of an init arg; std::monostate is YAML's null.
// An integer map is YAML's {0: 1, 4: 2} (GradientAccumulationScheduler's scheduling).
using IntMap = std::map<int64_t, int64_t>;
using ArgValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<std::string>, IntMap>;
std::string arg_value_str(const ArgValue& value);  // as YAML would print it

struct ArgSpec {
  std::string name;
  ArgType type = ArgType::kString;
  ArgValue default_value;  // std::monostate: null (nullable) or, if required, none
  std::string doc;
  bool required = false;
  bool nullable = false;
  std::vector<std::string> choices;  // kString only; empty = any
};

class ArgSchema {
 public:
  ArgSchema& add(ArgSpec spec);
  ArgSchema& add_bool(std::string name, std::optional<bool> default_value, std::string doc);
  ArgSchema& add_int(std::string name, std::optional<int64_t> default_value, std::string doc);
  ArgSchema& add_float(std::string name, std::optional<double> default_value, std::string doc);
  // `choices` non-empty: the value must be one of them.
  ArgSchema& add_string(std::string name, std::optional<std::string> default_value, std::string doc,
                        std::vector<std::string> choices = {});
  // Lightning's `int | float` (a batch count or a fraction).
  ArgSchema& add_int_or_float(std::string name, ArgValue default_value, std::string doc);
  // An integer, or a boolean read as 1 (true) or 0 (false): Lightning's fast_dev_run.
  ArgSchema& add_int_or_bool(std::string name, int64_t default_value, std::string doc);
  ArgSchema& add_string_list(std::string name, std::vector<std::string> default_value, std::string doc);
  ArgSchema& add_int_map(std::string name, IntMap default_value, std::string doc);
  // An argument without a default: the config must give it.
  ArgSchema& add_required(std::string name, ArgType type, std::string doc);

  const std::vector<ArgSpec>& specs() const { return specs_; }
  const ArgSpec* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<ArgSpec> specs_;
};

// The validated init args a factory receives: every schema key is present
// (given or defaulted). Getters throw lt::Error on a name or type the schema
// does not declare: that is a bug in the factory, not in the config.
class InitArgs {
 public:
  InitArgs() = default;
  InitArgs(std::map<std::string, ArgValue> values, const TrainerOptions* trainer = nullptr, std::string where = {})
      : values_(std::move(values)), trainer_(trainer), where_(std::move(where)) {}

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool is_null(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;  // integers are widened
  const std::string& get_string(const std::string& name) const;
  const std::vector<std::string>& get_string_list(const std::string& name) const;
  const IntMap& get_int_map(const std::string& name) const;
  std::optional<double> get_optional_float(const std::string& name) const;
  std::optional<int64_t> get_optional_int(const std::string& name) const;
  std::optional<bool> get_optional_bool(const std::string& name) const;
  std::optional<std::string> get_optional_string(const std::string& name) const;
  const ArgValue& get(const std::string& name) const;
  const std::map<std::string, ArgValue>& values() const { return values_; }

  // The Trainer options of the run being built (strategies read accelerator
  // and devices; loggers default_root_dir). Null outside the CLI.
  const TrainerOptions* trainer() const { return trainer_; }
  // Key path of these args in the config, e.g. "callbacks[1].init_args".
  const std::string& where() const { return where_; }

 private:
  std::map<std::string, ArgValue> values_;
  const TrainerOptions* trainer_ = nullptr;
  std::string where_;
};

// The init args a factory would get with no config: every default.
InitArgs default_init_args(const ArgSchema& schema, const TrainerOptions* trainer = nullptr);

// -- registry -------------------------------------------------------------------

template <typename T>
using Factory = std::function<std::shared_ptr<T>(const InitArgs&)>;

template <typename T>
struct RegistryEntry {
  std::string name;
  std::string doc;
  ArgSchema schema;
  Factory<T> factory;
  std::string origin;  // "builtin", or the plugin's path
};

// The kinds a registry holds, listed once: the base type, what it is called
// in configs and messages, and its heading in --help. Everything that goes
// over all kinds (the tables, merging a plugin, describe) is made from it.
#define LT_REGISTRY_KINDS(X)                   \
  X(LightningModule, "model", "Models")        \
  X(DataModule, "data module", "Data modules") \
  X(Callback, "callback", "Callbacks")         \
  X(Logger, "logger", "Loggers")               \
  X(Strategy, "strategy", "Strategies")        \
  X(FitLoop, "loop", "Loops")                  \
  X(LRSchedulerSpec, "lr_scheduler", "Learning-rate schedulers")

template <typename T>
struct RegistryKind;
#define LT_REGISTRY_KIND(T, name, title)         \
  template <>                                    \
  struct RegistryKind<T> {                       \
    static constexpr const char* kName = name;   \
    static constexpr const char* kTitle = title; \
  };
LT_REGISTRY_KINDS(LT_REGISTRY_KIND)
#undef LT_REGISTRY_KIND

class Registry {
 public:
  // The process-wide registry with the built-ins registered (a function-local
  // static, as c10/util/Registry.h does, so there is no static-init order).
  // Defined beside register_builtins() (cli/register_builtins.cpp), the one
  // place that knows every area.
  static Registry& global();

  // Throws lt::Error if `name` is already registered for this kind.
  template <typename T>
  void add(std::string name, std::string doc, ArgSchema schema, Factory<T> factory) {
    add_entry(RegistryEntry<T>{std::move(name), std::move(doc), std::move(schema), std::move(factory), origin_});
  }

  template <typename T>
  bool contains(const std::string& name) const {
    return table<T>().count(name) != 0;
  }
  // Throws lt::ValueError: "unknown <kind> 'x'; did you mean 'y'? (registered <kind>s: ...)".
  template <typename T>
  const RegistryEntry<T>& get(const std::string& name) const {
    auto it = table<T>().find(name);
    if (it == table<T>().end()) throw ValueError(unknown_name_message(RegistryKind<T>::kName, name, names<T>()));
    return it->second;
  }
  template <typename T>
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& kv : table<T>()) out.push_back(kv.first);
    return out;
  }
  // Builds `name` with every init arg at its default (C++ users, tests).
  template <typename T>
  std::shared_ptr<T> create(const std::string& name) const {
    const auto& entry = get<T>(name);
    return entry.factory(default_init_args(entry.schema));
  }

  // Loads a plugin by its explicit path (dlopen; never a search) and adds
  // what it registers. All-or-nothing: a duplicate name registers nothing.
  // Throws lt::ValueError on a missing file, a missing entry point or an
  // API version mismatch.
  void load_plugin(const std::string& path);
  const std::vector<std::string>& plugins() const { return plugins_; }

  // Every registered name with its doc and init args (for --help).
  std::string describe() const;

  // "unknown <kind> 'x'; did you mean 'y'? (registered <kind>s: a, b)"
  static std::string unknown_name_message(const std::string& kind, const std::string& name,
                                          const std::vector<std::string>& known);

 private:
  template <typename T>
  using Table = std::map<std::string, RegistryEntry<T>>;
#define LT_REGISTRY_TABLE(T, name, title) , std::tuple<Table<T>>()
  using Tables = decltype(std::tuple_cat(std::tuple<>() LT_REGISTRY_KINDS(LT_REGISTRY_TABLE)));
#undef LT_REGISTRY_TABLE

  template <typename T>
  const Table<T>& table() const {
    return std::get<Table<T>>(tables_);
  }
  template <typename T>
  void add_entry(RegistryEntry<T> entry) {
    auto& t = std::get<Table<T>>(tables_);
    auto it = t.find(entry.name);
    LT_CHECK(it == t.end(), "Registry: ", RegistryKind<T>::kName, " '", entry.name, "' is registered twice (by ",
             it->second.origin, " and by ", entry.origin, ")");
    t.emplace(entry.name, std::move(entry));
  }
  // Adds every entry of `other`; throws before adding anything on a duplicate.
  void merge(const Registry& other);
  template <typename T>
  void check_disjoint(const Table<T>& theirs) const {
    for (const auto& kv : theirs) {
      auto it = table<T>().find(kv.first);
      LT_CHECK_VALUE(it == table<T>().end(), RegistryKind<T>::kName, " '", kv.first, "' from ", kv.second.origin,
                     " is already registered by ", it->second.origin, "; nothing from the plugin was registered");
    }
  }
  template <typename T>
  void insert_all(const Table<T>& theirs) {
    for (const auto& kv : theirs) std::get<Table<T>>(tables_).emplace(kv.first, kv.second);
  }

  Tables tables_;
  std::string origin_ = "builtin";
  std::vector<std::string> plugins_;
  std::vector<std::string> loaded_canonical_;
};

// -- shared-library plugins ------------------------------------------------------------
// Bump when Registry, ArgSchema, InitArgs or a registrable base class changes
// in a way that breaks plugins built against the previous version.
// 2: HParams holds typed values (LightningModule's and Logger's layout
//    changed); Callback::checkpoint_dir.
constexpr uint32_t kPluginApiVersion = 2;

struct PluginInfo {
  uint32_t api_version;               // kPluginApiVersion the plugin was built with
  const char* name;                   // for messages and --help
  const char* version;                // the plugin's own version
  void (*register_plugin)(Registry&); // adds the plugin's entries
};

// Name of the function a plugin exports:
//   extern "C" const lt::PluginInfo* lightning_cpp_plugin_info() {
//     static const lt::PluginInfo info{lt::kPluginApiVersion, "mine", "1.0", &register_mine};
//     return &info;
//   }
constexpr const char* kPluginEntryPoint = "lightning_cpp_plugin_info";

// Closest of `known` to `name` by edit distance, or "" when nothing is close.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& known);

}  // namespace lt
