#include <lightning_cpp/loggers/utilities.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <system_error>
#include <variant>

#include <yaml-cpp/yaml.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/trainer_options.h>

namespace lt {

void SaveDirOrRootDir::add(ArgSchema& schema, const char* name, const std::string& /*d*/, const char* doc,
                           std::vector<std::string> choices) {
  schema.add_string(name, std::nullopt, doc, std::move(choices));
}

std::string SaveDirOrRootDir::read(const InitArgs& args, const char* name) {
  if (auto save_dir = args.get_optional_string(name)) return *save_dir;
  return args.trainer() != nullptr ? args.trainer()->default_root_dir() : std::string(".");
}

namespace fs = std::filesystem;

VersionFolder::VersionFolder(const char* logger, std::string save_dir, std::string name, std::optional<int64_t> version)
    : save_dir_(std::move(save_dir)), name_(std::move(name)), version_(version) {
  LT_CHECK_VALUE(!name_.empty(), logger, ": name must not be empty");
  if (version_) LT_CHECK_VALUE(*version_ >= 0, logger, ": version must be >= 0, got ", *version_);
}

int64_t VersionFolder::version() const {
  if (!version_) version_ = newest_version(save_dir_, name_) + 1;
  return *version_;
}

namespace {
// N of a folder named version_N; nullopt for any other name.
std::optional<int64_t> version_of_folder(const std::string& folder) {
  static const std::regex kVersion(R"(version_(\d+))");
  std::smatch m;
  if (!std::regex_match(folder, m, kVersion)) return std::nullopt;
  return std::stoll(m[1]);
}
}  // namespace

std::string VersionFolder::path() const {
  return (std::filesystem::path(save_dir_) / name_ / ("version_" + std::to_string(version()))).string();
}

void VersionFolder::continue_previous() {
  if (!version_) version_ = std::max<int64_t>(newest_version(save_dir_, name_), 0);
}

bool VersionFolder::continue_version_of(const std::string& checkpoint) {
  if (version_) return false;
  std::error_code root_error, file_error;
  const fs::path root = fs::weakly_canonical(fs::path(save_dir_) / name_, root_error);
  const fs::path file = fs::weakly_canonical(checkpoint, file_error);
  if (root_error || file_error) return false;
  // The checkpoint's path below <save_dir>/<name>: version_N/...
  const fs::path below = file.lexically_relative(root);
  if (below.empty() || std::distance(below.begin(), below.end()) < 2) return false;
  const std::optional<int64_t> version = version_of_folder(below.begin()->string());
  if (!version) return false;
  version_ = version;
  return true;
}

int64_t newest_version(const std::string& save_dir, const std::string& name) {
  const fs::path root = fs::path(save_dir) / name;
  int64_t newest = -1;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    if (const auto version = version_of_folder(it->path().filename().string())) newest = std::max(newest, *version);
  }
  return newest;
}

namespace {

// A double as PyYAML's yaml.dump writes it (Lightning's hparams.yaml), which
// YAML 1.1 readers (PyYAML) take for a float again: Python's repr with ".0"
// before a bare exponent (1e-07 -> 1.0e-07; PyYAML reads "1e-07" as a string).
std::string yaml_float(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = float_repr(v);
  if (s.find('.') == std::string::npos) s.insert(s.find('e'), ".0");
  return s;
}

// Whether a YAML reader (YAML 1.1 or 1.2) could take this plain scalar for
// something other than a string: a number, a bool, null, a date, a merge key.
bool needs_quotes(const std::string& s) {
  static const std::regex kOther(
      R"(|~|null|Null|NULL|y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|<<|=)"
      R"(|[-+]?\.?[0-9].*|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  return std::regex_match(s, kOther);
}

}  // namespace

void save_hparams_to_yaml(const std::string& path, const HParams& params) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& [k, v] : params) {
    out << YAML::Key;
    if (needs_quotes(k)) out << YAML::SingleQuoted;
    out << k << YAML::Value;
    if (const auto* b = std::get_if<bool>(&v.value())) {
      out << *b;
    } else if (const auto* i = std::get_if<int64_t>(&v.value())) {
      out << std::to_string(*i);
    } else if (const auto* d = std::get_if<double>(&v.value())) {
      out << yaml_float(*d);
    } else if (needs_quotes(v.str())) {
      out << YAML::SingleQuoted << v.str();  // a string stays a string: '8', 'true'
    } else {
      out << v.str();
    }
  }
  out << YAML::EndMap;
  replace_file(path, (params.empty() ? std::string("{}") : std::string(out.c_str())) + "\n");
}

}  // namespace lt
