#include <lightning_cpp/cli/config.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include <yaml-cpp/yaml.h>

#include <lightning_cpp/core/check.h>

namespace lt::cli {

std::string ConfigSource::str() const {
  if (!file.empty()) return line > 0 ? c10::str(file, ":", line) : file;
  if (!arg.empty()) return c10::str("command line '", arg, "'");
  return "default";
}

ConfigNode ConfigNode::null(ConfigSource source) {
  ConfigNode n;
  n.source = n.key_source = std::move(source);
  return n;
}

ConfigNode ConfigNode::scalar(std::string value, ConfigSource source, bool quoted) {
  ConfigNode n = null(std::move(source));
  n.kind = Kind::kScalar;
  n.value = std::move(value);
  n.quoted = quoted;
  return n;
}

ConfigNode ConfigNode::map(ConfigSource source) {
  ConfigNode n = null(std::move(source));
  n.kind = Kind::kMap;
  return n;
}

ConfigNode ConfigNode::list(ConfigSource source) {
  ConfigNode n = null(std::move(source));
  n.kind = Kind::kList;
  return n;
}

const ConfigNode* ConfigNode::find(const std::string& key) const {
  for (const auto& kv : entries) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

ConfigNode* ConfigNode::find(const std::string& key) {
  return const_cast<ConfigNode*>(static_cast<const ConfigNode*>(this)->find(key));
}

ConfigNode& ConfigNode::set(const std::string& key, ConfigNode value) {
  if (ConfigNode* existing = find(key)) {
    *existing = std::move(value);
    return *existing;
  }
  entries.emplace_back(key, std::move(value));
  return entries.back().second;
}

bool ConfigNode::erase(const std::string& key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->first == key) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : entries) out.push_back(kv.first);
  return out;
}

std::string ConfigNode::describe() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kScalar: return quoted ? "'\"" + value + "\"' (a quoted string)" : "'" + value + "'";
    case Kind::kMap: return "a mapping";
    case Kind::kList: return "a list";
  }
  return "?";
}

namespace {

ConfigSource at(const std::string& file, const YAML::Mark& mark, const ConfigSource& fallback) {
  if (mark.line < 0) return fallback;
  return ConfigSource{file, mark.line + 1, {}};
}

// A config is small: a bound on its nodes, counted as expanded (YAML aliases
// share nodes that the conversion copies: nested anchors grow exponentially).
constexpr int64_t kMaxConfigNodes = 100000;

// A NUL byte ends a C string: in a path it names another file than the one
// written ("out/a\0b" creates "out/a"); no config value needs one.
void check_no_nul(const std::string& text, const ConfigSource& source, const std::string& path) {
  LT_CHECK_VALUE(text.find('\0') == std::string::npos, source.str(), ": ", path.empty() ? "a key" : path,
                 ": a NUL byte (\\0) in '", c10::str(text.substr(0, text.find('\0')), "\\0..."),
                 "'; config values and keys cannot contain one");
}

ConfigNode convert(const YAML::Node& node, const std::string& file, const ConfigSource& fallback,
                   const std::string& path, int64_t& nodes) {
  const ConfigSource source = at(file, node.Mark(), fallback);
  LT_CHECK_VALUE(++nodes <= kMaxConfigNodes, source.str(), ": ", path.empty() ? "the config" : path,
                 ": the config expands to more than ", kMaxConfigNodes, " values (YAML aliases of aliases?)");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return ConfigNode::null(source);
    case YAML::NodeType::Scalar:
      check_no_nul(node.Scalar(), source, path);
      // yaml-cpp tags plain scalars "?" and quoted ones "!".
      return ConfigNode::scalar(node.Scalar(), source, node.Tag() == "!");
    case YAML::NodeType::Sequence: {
      ConfigNode out = ConfigNode::list(source);
      for (const auto& item : node) {
        out.items.push_back(convert(item, file, source, c10::str(path, "[", out.items.size(), "]"), nodes));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      ConfigNode out = ConfigNode::map(source);
      std::unordered_map<std::string, int> lines;  // key -> its line: duplicates in linear time
      for (const auto& kv : node) {
        const ConfigSource key_source = at(file, kv.first.Mark(), source);
        LT_CHECK_VALUE(kv.first.IsScalar(), key_source.str(), ": only plain keys are supported, got a ",
                       kv.first.IsMap() ? "mapping" : "list", " as a key");
        const std::string key = kv.first.Scalar();
        const std::string key_path = path.empty() ? key : path + "." + key;
        check_no_nul(key, key_source, path);
        const auto [seen, inserted] = lines.emplace(key, key_source.line);
        LT_CHECK_VALUE(inserted, key_source.str(), ": ", key_path, ": duplicate key (also on line ", seen->second,
                       ")");
        ConfigNode value = convert(kv.second, file, key_source, key_path, nodes);
        value.key_source = key_source;
        out.entries.emplace_back(key, std::move(value));
      }
      return out;
    }
  }
  return ConfigNode::null(source);
}

}  // namespace

ConfigNode parse_config_text(const std::string& text, const ConfigSource& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string where = source.file.empty() ? source.str() : c10::str(source.file, ":", e.mark.line + 1);
    // yaml-cpp says "bad file" when its depth guard trips.
    const std::string what = e.msg == "bad file" ? "nested more than 500 levels deep (a config needs a few)" : e.msg;
    throw ValueError(c10::str(where, ": invalid YAML: ", what));
  }
  int64_t nodes = 0;
  return convert(root, source.file, source, "", nodes);
}

ConfigNode load_config_file(const std::string& path) {
  std::error_code ec;
  LT_CHECK_VALUE(!std::filesystem::is_directory(path, ec), path, ": is a directory, not a config file");
  std::ifstream in(path);
  LT_CHECK_VALUE(in.good(), path, ": cannot read config file (does it exist?)");
  std::stringstream ss;
  ss << in.rdbuf();
  ConfigNode root = parse_config_text(ss.str(), ConfigSource{path, 0, {}});
  if (root.is_null()) root = ConfigNode::map(ConfigSource{path, 1, {}});  // an empty file
  LT_CHECK_VALUE(root.is_map(), path, ":", root.source.line, ": a config file must be a mapping (trainer:, model:, ...), got ",
                 root.describe());
  return root;
}

void merge_config(ConfigNode& base, const ConfigNode& overlay) {
  if (base.is_scalar() && overlay.is_map() && !overlay.entries.empty()) {
    bool class_keys = true;
    for (const auto& kv : overlay.entries) class_keys &= kv.first == "class_path" || kv.first == "init_args";
    if (class_keys) {
      // `model: Foo` in one file, `model: {init_args: ...}` in the next: same class, more arguments.
      ConfigNode expanded = ConfigNode::map(base.source);
      expanded.key_source = base.key_source;
      expanded.set("class_path", ConfigNode::scalar(base.value, base.source, base.quoted));
      base = std::move(expanded);
    }
  }
  if (!base.is_map() || !overlay.is_map()) {
    ConfigSource key_source = base.key_source;
    base = overlay;
    if (overlay.key_source.file.empty() && overlay.key_source.arg.empty()) base.key_source = key_source;
    return;
  }
  for (const auto& [key, value] : overlay.entries) {
    if (ConfigNode* existing = base.find(key)) {
      merge_config(*existing, value);
    } else {
      base.entries.emplace_back(key, value);
    }
  }
}

namespace {
// Keys under which a value names a class: a scalar there may be expanded.
bool is_class_key(const std::string& key) { return key == "class_path" || key == "init_args"; }
}  // namespace

void apply_override(ConfigNode& root, const std::string& dotted_key, const std::string& value, const std::string& arg) {
  const ConfigSource source{{}, 0, arg};
  LT_CHECK_VALUE(!dotted_key.empty(), source.str(), ": empty option name");
  std::vector<std::string> parts;
  std::stringstream ss(dotted_key);
  for (std::string part; std::getline(ss, part, '.');) {
    LT_CHECK_VALUE(!part.empty(), source.str(), ": '", dotted_key, "' has an empty key");
    parts.push_back(part);
  }
  ConfigNode parsed = parse_config_text(value, source);
  // Every node of the parsed value comes from this argument.
  std::function<void(ConfigNode&)> stamp = [&](ConfigNode& n) {
    n.source = n.key_source = source;
    for (auto& kv : n.entries) stamp(kv.second);
    for (auto& item : n.items) stamp(item);
  };
  stamp(parsed);

  ConfigNode* node = &root;
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    const bool last = i + 1 == parts.size();
    if (node->is_scalar() && is_class_key(key)) {
      // `model: MlpClassifier` then `--model.init_args.hidden=3`.
      ConfigNode expanded = ConfigNode::map(node->source);
      expanded.key_source = node->key_source;
      expanded.set("class_path", ConfigNode::scalar(node->value, node->source, node->quoted));
      *node = std::move(expanded);
    }
    if (node->is_null()) {
      ConfigSource ks = node->key_source;
      *node = ConfigNode::map(source);
      node->key_source = ks;
    }
    if (node->is_list()) {
      // At most 9 digits: no list is longer, and stoul cannot overflow.
      const bool numeric =
          !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
      LT_CHECK_VALUE(numeric && std::stoul(key) < node->items.size(), source.str(), ": ", path,
                     " is a list of ", node->items.size(), " item(s); '", key, "' is not an index into it");
      node = &node->items[std::stoul(key)];
    } else {
      LT_CHECK_VALUE(node->is_map(), source.str(), ": cannot set '", dotted_key, "': ", path.empty() ? "the config" : path,
                     " is ", node->describe(), ", not a mapping");
      if (last) {
        parsed.key_source = source;
        ConfigNode* existing = node->find(key);
        if (existing != nullptr && existing->is_map() && parsed.is_map()) {
          merge_config(*existing, parsed);
        } else {
          node->set(key, parsed);
        }
        return;
      }
      ConfigNode* child = node->find(key);
      if (child == nullptr) {
        ConfigNode fresh = ConfigNode::map(source);
        child = &node->set(key, std::move(fresh));
      }
      node = child;
    }
    path += (path.empty() ? "" : ".") + key;
  }
  // The key ended on a list item.
  *node = parsed;
}

namespace {
// Whether a plain scalar would read back as something other than this string.
bool needs_quotes(const std::string& s) {
  static const std::regex kSpecial(
      R"(^(|~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|no|No|on|On|off|Off|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)|0x[0-9a-fA-F]+|0o[0-7]+)$)");
  return std::regex_match(s, kSpecial);
}

void emit(YAML::Emitter& out, const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::kNull:
      out << YAML::Null;
      break;
    case ConfigNode::Kind::kScalar:
      if (node.quoted && needs_quotes(node.value)) {
        out << YAML::DoubleQuoted << node.value;
      } else {
        out << node.value;
      }
      break;
    case ConfigNode::Kind::kList:
      if (node.items.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      out << YAML::BeginSeq;
      for (const auto& item : node.items) emit(out, item);
      out << YAML::EndSeq;
      break;
    case ConfigNode::Kind::kMap:
      if (node.entries.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        break;
      }
      out << YAML::BeginMap;
      for (const auto& [k, v] : node.entries) {
        out << YAML::Key << k << YAML::Value;
        emit(out, v);
      }
      out << YAML::EndMap;
      break;
  }
}
}  // namespace

std::string to_yaml(const ConfigNode& node) {
  YAML::Emitter out;
  emit(out, node);
  return std::string(out.c_str()) + "\n";
}

}  // namespace lt::cli
