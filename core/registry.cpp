#include <lightning_cpp/core/registry.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include <lightning_cpp/core/trainer_options.h>

namespace lt {

namespace fs = std::filesystem;

// -- schema ---------------------------------------------------------------------------

const char* arg_type_name(ArgType type) {
  switch (type) {
    case ArgType::kBool: return "a boolean (true/false)";
    case ArgType::kInt: return "an integer";
    case ArgType::kFloat: return "a number";
    case ArgType::kString: return "a string";
    case ArgType::kIntOrFloat: return "an integer (a count) or a float (a fraction)";
    case ArgType::kIntOrBool: return "an integer or a boolean (true: 1)";
    case ArgType::kStringList: return "a list of strings";
    case ArgType::kIntMap: return "a mapping of integers to integers";
  }
  return "?";
}

namespace {
ArgSpec spec_of(std::string name, ArgType type, ArgValue default_value, std::string doc) {
  ArgSpec s;
  s.name = std::move(name);
  s.type = type;
  s.default_value = std::move(default_value);
  s.doc = std::move(doc);
  return s;
}

std::string float_str(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string arg_value_str(const ArgValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return float_str(d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<std::string>& v) const {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
      return out + "]";
    }
    std::string operator()(const IntMap& m) const {
      std::string out = "{";
      for (const auto& [k, v] : m) out += (out.size() > 1 ? ", " : "") + std::to_string(k) + ": " + std::to_string(v);
      return out + "}";
    }
  };
  return std::visit(Visitor{}, value);
}

ArgSchema& ArgSchema::add(ArgSpec spec) {
  LT_CHECK(find(spec.name) == nullptr, "ArgSchema: argument '", spec.name, "' is declared twice");
  specs_.push_back(std::move(spec));
  return *this;
}

ArgSchema& ArgSchema::add_bool(std::string name, std::optional<bool> default_value, std::string doc) {
  ArgSpec s = spec_of(std::move(name), ArgType::kBool, {}, std::move(doc));
  if (default_value) s.default_value = *default_value;
  s.nullable = !default_value;
  return add(std::move(s));
}

ArgSchema& ArgSchema::add_int(std::string name, std::optional<int64_t> default_value, std::string doc) {
  ArgSpec s = spec_of(std::move(name), ArgType::kInt, {}, std::move(doc));
  if (default_value) s.default_value = *default_value;
  s.nullable = !default_value;
  return add(std::move(s));
}

ArgSchema& ArgSchema::add_float(std::string name, std::optional<double> default_value, std::string doc) {
  ArgSpec s = spec_of(std::move(name), ArgType::kFloat, {}, std::move(doc));
  if (default_value) s.default_value = *default_value;
  s.nullable = !default_value;
  return add(std::move(s));
}

ArgSchema& ArgSchema::add_string(std::string name, std::optional<std::string> default_value, std::string doc,
                                 std::vector<std::string> choices) {
  ArgSpec s = spec_of(std::move(name), ArgType::kString, {}, std::move(doc));
  if (default_value) s.default_value = *default_value;
  s.nullable = !default_value;
  s.choices = std::move(choices);
  return add(std::move(s));
}

ArgSchema& ArgSchema::add_int_or_float(std::string name, ArgValue default_value, std::string doc) {
  LT_CHECK(std::holds_alternative<int64_t>(default_value) || std::holds_alternative<double>(default_value),
           "ArgSchema: the default of '", name, "' must be an integer or a float");
  return add(spec_of(std::move(name), ArgType::kIntOrFloat, std::move(default_value), std::move(doc)));
}

ArgSchema& ArgSchema::add_int_or_bool(std::string name, int64_t default_value, std::string doc) {
  return add(spec_of(std::move(name), ArgType::kIntOrBool, default_value, std::move(doc)));
}

ArgSchema& ArgSchema::add_int_map(std::string name, IntMap default_value, std::string doc) {
  return add(spec_of(std::move(name), ArgType::kIntMap, std::move(default_value), std::move(doc)));
}

ArgSchema& ArgSchema::add_string_list(std::string name, std::vector<std::string> default_value, std::string doc) {
  return add(spec_of(std::move(name), ArgType::kStringList, std::move(default_value), std::move(doc)));
}

ArgSchema& ArgSchema::add_required(std::string name, ArgType type, std::string doc) {
  ArgSpec s = spec_of(std::move(name), type, {}, std::move(doc));
  s.required = true;
  return add(std::move(s));
}

const ArgSpec* ArgSchema::find(const std::string& name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> ArgSchema::names() const {
  std::vector<std::string> out;
  for (const auto& s : specs_) out.push_back(s.name);
  return out;
}

// -- InitArgs ---------------------------------------------------------------------------

const ArgValue& InitArgs::get(const std::string& name) const {
  auto it = values_.find(name);
  LT_CHECK(it != values_.end(), "InitArgs", where_.empty() ? "" : " (" + where_ + ")", ": no argument '", name,
           "'; the factory asks for an argument its schema does not declare");
  return it->second;
}

bool InitArgs::is_null(const std::string& name) const { return std::holds_alternative<std::monostate>(get(name)); }

namespace {
template <typename V>
const V& typed(const InitArgs& args, const std::string& name, const char* type) {
  const ArgValue& v = args.get(name);
  const V* p = std::get_if<V>(&v);
  LT_CHECK(p != nullptr, "InitArgs", args.where().empty() ? "" : " (" + args.where() + ")", ": argument '", name,
           "' is ", arg_value_str(v), ", not ", type);
  return *p;
}
}  // namespace

bool InitArgs::get_bool(const std::string& name) const { return typed<bool>(*this, name, "a bool"); }
int64_t InitArgs::get_int(const std::string& name) const { return typed<int64_t>(*this, name, "an integer"); }
double InitArgs::get_float(const std::string& name) const {
  if (const auto* i = std::get_if<int64_t>(&get(name))) return static_cast<double>(*i);
  return typed<double>(*this, name, "a float");
}
const std::string& InitArgs::get_string(const std::string& name) const {
  return typed<std::string>(*this, name, "a string");
}
const std::vector<std::string>& InitArgs::get_string_list(const std::string& name) const {
  return typed<std::vector<std::string>>(*this, name, "a list of strings");
}
const IntMap& InitArgs::get_int_map(const std::string& name) const {
  return typed<IntMap>(*this, name, "a mapping of integers");
}
std::optional<double> InitArgs::get_optional_float(const std::string& name) const {
  if (is_null(name)) return std::nullopt;
  return get_float(name);
}
std::optional<int64_t> InitArgs::get_optional_int(const std::string& name) const {
  if (is_null(name)) return std::nullopt;
  return get_int(name);
}
std::optional<bool> InitArgs::get_optional_bool(const std::string& name) const {
  if (is_null(name)) return std::nullopt;
  return get_bool(name);
}
std::optional<std::string> InitArgs::get_optional_string(const std::string& name) const {
  if (is_null(name)) return std::nullopt;
  return get_string(name);
}

InitArgs default_init_args(const ArgSchema& schema, const TrainerOptions* trainer) {
  std::map<std::string, ArgValue> values;
  for (const auto& spec : schema.specs()) {
    LT_CHECK_VALUE(!spec.required, "argument '", spec.name, "' is required (", arg_type_name(spec.type), ")");
    values[spec.name] = spec.default_value;
  }
  return InitArgs(std::move(values), trainer);
}

// -- names -------------------------------------------------------------------------------

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& k : known) {
    size_t d = edit_distance(name, k);
    // A known name that contains the typed one (or the reverse) is a likely
    // meant: "Mlp" for "MlpClassifier", "max_epoch" for "max_epochs".
    if (d >= best_distance && name.size() >= 3 &&
        (k.find(name) != std::string::npos || name.find(k) != std::string::npos)) {
      d = best_distance - 1;
    }
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best;
}

std::string Registry::unknown_name_message(const std::string& kind, const std::string& name,
                                           const std::vector<std::string>& known) {
  std::string msg = c10::str("unknown ", kind, " '", name, "'");
  const std::string guess = did_you_mean(name, known);
  if (!guess.empty()) msg += c10::str("; did you mean '", guess, "'?");
  msg += c10::str(" (registered ", plural(kind), ": ", known.empty() ? std::string("none") : c10::Join(", ", known),
                  ")");
  return msg;
}

// -- registry ---------------------------------------------------------------------------

void Registry::merge(const Registry& other) {
  // Check every kind before inserting anything: a plugin registers all or nothing.
  std::apply([this](const auto&... theirs) { (check_disjoint(theirs), ...); }, other.tables_);
  std::apply([this](const auto&... theirs) { (insert_all(theirs), ...); }, other.tables_);
}

void Registry::load_plugin(const std::string& path) {
  LT_CHECK_VALUE(!path.empty(), "plugin path is empty");
  // dlopen searches LD_LIBRARY_PATH for a bare name; a plugin is only ever
  // loaded from the path given.
  const std::string explicit_path = path.find('/') == std::string::npos ? "./" + path : path;
  std::error_code ec;
  LT_CHECK_VALUE(fs::is_regular_file(explicit_path, ec), "plugin '", path, "' does not exist or is not a file");
  const std::string canonical = fs::canonical(explicit_path, ec).string();
  for (const auto& loaded : loaded_canonical_) {
    if (loaded == canonical) return;  // the same file named twice (YAML and --plugin): load once
  }
  void* handle = ::dlopen(explicit_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    throw ValueError(c10::str("cannot load plugin '", path, "': ", err ? err : "unknown dlopen error"));
  }
  using InfoFn = const PluginInfo* (*)();
  auto info_fn = reinterpret_cast<InfoFn>(::dlsym(handle, kPluginEntryPoint));
  if (info_fn == nullptr) {
    ::dlclose(handle);
    throw ValueError(c10::str("plugin '", path, "' does not export extern \"C\" const lt::PluginInfo* ",
                              kPluginEntryPoint, "(); is it a lightning-cpp plugin?"));
  }
  const PluginInfo* info = info_fn();
  if (info == nullptr || info->api_version != kPluginApiVersion || info->register_plugin == nullptr) {
    const uint32_t version = info ? info->api_version : 0;
    ::dlclose(handle);
    throw ValueError(c10::str("plugin '", path, "' was built for lightning-cpp plugin API version ", version,
                              ", but this lightning-cpp has plugin API version ", kPluginApiVersion,
                              "; rebuild the plugin against this lightning-cpp"));
  }
  Registry staging;
  staging.origin_ = c10::str("plugin '", info->name ? info->name : "?", "' (", path, ")");
  try {
    info->register_plugin(staging);
  } catch (const std::exception& e) {
    throw ValueError(c10::str("plugin '", path, "' failed to register: ", e.what()));
  }
  merge(staging);
  // The handle stays open for the life of the process: the factories live in it.
  loaded_canonical_.push_back(canonical);
  plugins_.push_back(path);
}

namespace {
template <typename T>
void describe_table(std::ostringstream& os, const std::map<std::string, RegistryEntry<T>>& table) {
  if (table.empty()) return;
  os << RegistryKind<T>::kTitle << ":\n";
  for (const auto& [name, e] : table) {
    os << "  " << name;
    if (!e.doc.empty()) os << " - " << e.doc;
    if (e.origin != "builtin") os << " [" << e.origin << "]";
    os << "\n";
    std::string args;
    for (const auto& spec : e.schema.specs()) {
      args += (args.empty() ? "" : ", ") + spec.name + "=" +
              (spec.required ? "<required>" : arg_value_str(spec.default_value));
    }
    if (!args.empty()) os << "      init_args: " << args << "\n";
  }
}
}  // namespace

std::string Registry::describe() const {
  std::ostringstream os;
  std::apply([&os](const auto&... tables) { (describe_table(os, tables), ...); }, tables_);
  if (!plugins_.empty()) os << "Plugins loaded: " << c10::Join(", ", plugins_) << "\n";
  return os.str();
}

}  // namespace lt
