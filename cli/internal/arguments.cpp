#include <lightning_cpp/cli/internal/arguments.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <stdexcept>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/core/check.h>

namespace lt::cli::detail {

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

namespace {

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

}  // namespace

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

}  // namespace lt::cli::detail
