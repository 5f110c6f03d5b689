#include <lightning_cpp/loggers/utilities.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include <lightning_cpp/core/files.h>

namespace lt {

namespace fs = std::filesystem;

int64_t newest_version(const std::string& save_dir, const std::string& name) {
  const fs::path root = fs::path(save_dir) / name;
  int64_t newest = -1;
  std::error_code ec;
  static const std::regex kVersion(R"(version_(\d+))");
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string folder = it->path().filename().string();
    if (it->is_directory() && std::regex_match(folder, m, kVersion)) {
      newest = std::max<int64_t>(newest, std::stoll(m[1]));
    }
  }
  return newest;
}

void save_hparams_to_yaml(const std::string& path, const HParams& params) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& [k, v] : params) out << YAML::Key << k << YAML::Value << v;
  out << YAML::EndMap;
  replace_file(path, (params.empty() ? std::string("{}") : std::string(out.c_str())) + "\n");
}

}  // namespace lt
