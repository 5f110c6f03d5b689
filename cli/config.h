#pragma once
// Config trees for the lightning-cpp command: YAML files (yaml-cpp) and
// `--a.b.c=value` overrides, merged in order, every value remembering where
// it came from so that errors name the file, the line and the key path.

#include <string>
#include <utility>
#include <vector>

namespace lt::cli {

struct ConfigSource {
  std::string file;  // the YAML file as given; empty for the command line and defaults
  int line = 0;      // 1-based; 0: unknown
  std::string arg;   // the command-line argument, for overrides
  // "configs/x.yaml:12", "command line '--trainer.max_epochs=x'", or "default".
  std::string str() const;
};

class ConfigNode {
 public:
  enum class Kind { kNull, kScalar, kMap, kList };

  static ConfigNode null(ConfigSource source = {});
  static ConfigNode scalar(std::string value, ConfigSource source = {}, bool quoted = false);
  static ConfigNode map(ConfigSource source = {});
  static ConfigNode list(ConfigSource source = {});

  Kind kind = Kind::kNull;
  std::string value;    // kScalar
  bool quoted = false;  // a quoted scalar is always a string
  std::vector<std::pair<std::string, ConfigNode>> entries;  // kMap, in file order
  std::vector<ConfigNode> items;                            // kList
  ConfigSource source;      // where the value is
  ConfigSource key_source;  // where its key is (map entries)

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_map() const { return kind == Kind::kMap; }
  bool is_list() const { return kind == Kind::kList; }
  const ConfigNode* find(const std::string& key) const;
  ConfigNode* find(const std::string& key);
  // Replaces the entry's value (keeping its position) or appends it.
  ConfigNode& set(const std::string& key, ConfigNode value);
  bool erase(const std::string& key);
  std::vector<std::string> keys() const;
  // "'abc'", "a mapping", "a list", "null": how errors describe a value.
  std::string describe() const;
};

// Throws lt::ValueError "<path>: cannot read config file" or "<path>:<line>: invalid YAML: ...".
ConfigNode load_config_file(const std::string& path);
ConfigNode parse_config_text(const std::string& text, const ConfigSource& source);
// Maps merge key by key; anything else in `overlay` replaces what `base` had.
void merge_config(ConfigNode& base, const ConfigNode& overlay);
// `--trainer.max_epochs=3`: the value is parsed as YAML; maps are created on
// the way, list items are addressed by index (callbacks.0.init_args.patience),
// and a class given by name alone is expanded to {class_path: name}.
void apply_override(ConfigNode& root, const std::string& dotted_key, const std::string& value, const std::string& arg);
std::string to_yaml(const ConfigNode& node);

}  // namespace lt::cli
