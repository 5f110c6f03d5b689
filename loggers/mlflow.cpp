#include <lightning_cpp/loggers/mlflow.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

namespace fs = std::filesystem;

namespace {

constexpr int kRunning = 1, kFinished = 3, kFailed = 4;  // MLflow's RunStatus
constexpr size_t kParamLength = 250;                     // Lightning truncates a param's value to this

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The value of a top-level "key: value" line of a meta.yaml (quotes removed); empty if none.
std::string meta_value(const fs::path& meta, const std::string& key) {
  std::ifstream in(meta);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ": ", 0) != 0) continue;
    std::string v = line.substr(key.size() + 2);
    if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') {  // as yaml_quoted writes it
      v = v.substr(1, v.size() - 2);
      for (size_t at = 0; (at = v.find("''", at)) != std::string::npos; ++at) v.erase(at, 1);
    } else if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {  // a plain name MLflow double-quoted
      v = v.substr(1, v.size() - 2);
    }
    return v;
  }
  return {};
}

// A YAML single-quoted scalar, as any string can be.
std::string yaml_quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string random_hex(size_t digits) {
  static std::mt19937_64 rng(std::random_device{}());
  std::string out;
  while (out.size() < digits) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
    out += buf;
  }
  return out.substr(0, digits);
}

std::string file_uri(const fs::path& path) { return "file://" + fs::absolute(path).lexically_normal().string(); }

// A key as a path under metrics/ or params/: MLflow's keys may hold "/" (folders), never ".." or a leading "/".
fs::path key_path(const fs::path& folder, const std::string& key, const char* what) {
  const fs::path relative(key);
  bool safe = !key.empty() && key.front() != '/';
  for (const auto& part : relative) safe = safe && part != ".." && part != ".";
  LT_CHECK_VALUE(safe, "MLflowLogger: the ", what, " key '", key, "' is not a relative path without '.' or '..' parts");
  return folder / relative;
}

}  // namespace

MLflowLogger::MLflowLogger(MLflowLoggerOptions options) : options_(std::move(options)) {
  {
    const MLflowLoggerOptions& options = options_;
    const char* owner = "MLflowLogger: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/loggers/mlflow_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
  }
  const std::string& uri = options_.tracking_uri();
  // file:///abs, file:/abs and file:relative
  store_ = uri.empty() ? options_.save_dir() : uri.rfind("file://", 0) == 0 ? uri.substr(7) : uri.substr(5);
  LT_CHECK_VALUE(!store_.empty(), "MLflowLogger: tracking_uri '", uri, "' names no folder");
  LT_CHECK_VALUE(options_.run_id().empty() || std::regex_match(options_.run_id(), std::regex("[0-9a-f]{32}")),
                 "MLflowLogger: run_id must be an MLflow run id (32 hexadecimal digits), got '", options_.run_id(),
                 "'");
}

void MLflowLogger::resolve() const {
  if (!run_id_.empty()) return;
  const fs::path store(store_);
  std::error_code ec;
  if (!options_.run_id().empty()) {
    // The given run, in whichever experiment holds it.
    for (fs::directory_iterator it(store, ec), end; !ec && it != end; it.increment(ec)) {
      if (fs::exists(it->path() / options_.run_id() / "meta.yaml")) experiment_id_ = it->path().filename().string();
    }
    LT_CHECK_VALUE(!experiment_id_.empty(), "MLflowLogger: run_id '", options_.run_id(), "' is no run in '", store_,
                   "'");
    run_id_ = options_.run_id();
    return;
  }
  if (experiment_id_.empty()) {
    for (fs::directory_iterator it(store, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path meta = it->path() / "meta.yaml";
      if (fs::exists(meta) && meta_value(meta, "name") == options_.experiment_name() &&
          meta_value(meta, "lifecycle_stage") == "active") {
        experiment_id_ = it->path().filename().string();
      }
    }
  }
  if (experiment_id_.empty()) {
    // MLflow's file store numbers experiments with random positive integers.
    do {
      experiment_id_ = std::to_string(std::stoull(random_hex(15), nullptr, 16));
    } while (fs::exists(store / experiment_id_));
  }
  if (continue_newest_) {
    // The experiment's newest run (by start_time), if any.
    int64_t newest = -1;
    for (fs::directory_iterator it(store / experiment_id_, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path meta = it->path() / "meta.yaml";
      if (!it->is_directory() || !fs::exists(meta)) continue;
      const std::string start = meta_value(meta, "start_time");
      const int64_t t = start.empty() || start == "null" ? 0 : std::stoll(start);
      if (t > newest) newest = t, run_id_ = it->path().filename().string();
    }
  }
  if (run_id_.empty()) run_id_ = random_hex(32);  // uuid4().hex's form
}

std::string MLflowLogger::name() const {
  resolve();
  return experiment_id_;
}

const std::string& MLflowLogger::run_id() const {
  resolve();
  return run_id_;
}

std::string MLflowLogger::log_dir() const {
  resolve();
  return (fs::path(store_) / experiment_id_ / run_id_).string();
}

void MLflowLogger::write_run_meta(int status, int64_t end_time_ms) {
  const fs::path run = log_dir();
  std::ostringstream meta;
  meta << "artifact_uri: " << file_uri(run / "artifacts") << "\n"
       << "end_time: " << (end_time_ms < 0 ? std::string("null") : std::to_string(end_time_ms)) << "\n"
       << "entry_point_name: ''\n"
       << "experiment_id: '" << experiment_id_ << "'\n"
       << "lifecycle_stage: active\n"
       << "run_id: " << run_id_ << "\n"
       << "run_name: " << yaml_quoted(run_name_) << "\n"
       << "source_name: ''\n"
       << "source_type: 4\n"
       << "source_version: ''\n"
       << "start_time: " << start_time_ms_ << "\n"
       << "status: " << status << "\n"
       << "tags: []\n"
       << "user_id: " << yaml_quoted(std::getenv("USER") != nullptr ? std::getenv("USER") : "unknown") << "\n";
  replace_file((run / "meta.yaml").string(), meta.str());
}

void MLflowLogger::open_run() {
  if (opened_) return;
  resolve();
  const fs::path experiment = fs::path(store_) / experiment_id_;
  const int64_t now = now_ms();
  if (!fs::exists(experiment / "meta.yaml")) {
    fs::create_directories(experiment);
    const std::string artifacts =
        options_.artifact_location().empty() ? file_uri(experiment) : options_.artifact_location();
    replace_file((experiment / "meta.yaml").string(),
                 c10::str("artifact_location: ", artifacts, "\ncreation_time: ", now, "\nexperiment_id: '",
                          experiment_id_, "'\nlast_update_time: ", now,
                          "\nlifecycle_stage: active\nname: ", yaml_quoted(options_.experiment_name()), "\n"));
  }
  const fs::path run = experiment / run_id_;
  // A run that exists (resumed, or run_id given) keeps its start and, unless given one, its name.
  const bool exists = fs::exists(run / "meta.yaml");
  const std::string started = exists ? meta_value(run / "meta.yaml", "start_time") : "";
  start_time_ms_ = started.empty() || started == "null" ? now : std::stoll(started);
  run_name_ = options_.run_name();
  if (run_name_.empty() && exists) run_name_ = meta_value(run / "meta.yaml", "run_name");
  if (run_name_.empty()) run_name_ = run_id_.substr(0, 8);
  for (const char* folder : {"metrics", "params", "tags", "artifacts"}) fs::create_directories(run / folder);
  write_run_meta(kRunning, -1);  // a resumed run runs again
  replace_file((run / "tags" / "mlflow.runName").string(), run_name_);
  for (const auto& [key, value] : options_.tags()) {
    const fs::path path = key_path(run / "tags", key, "tag");
    fs::create_directories(path.parent_path());
    replace_file(path.string(), value);
  }
  opened_ = true;
}

void MLflowLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  open_run();
  const fs::path folder = fs::path(log_dir()) / "metrics";
  const std::string stamp = std::to_string(now_ms());
  static const std::regex kNotAllowed("[^a-zA-Z0-9_/. -]+");  // Lightning's MLFlowLogger drops these
  for (const auto& [given, value] : metrics) {
    const std::string prefixed = options_.prefix().empty() ? given : options_.prefix() + "-" + given;
    const std::string key = std::regex_replace(prefixed, kNotAllowed, "");
    if (key != prefixed && !warned_keys_) {
      rank_zero_warn("MLflowLogger: MLflow only allows '_', '/', '.', '-' and ' ' as special characters in a ",
                     "metric's name; '", prefixed, "' is logged as '", key, "' (and so on for others)");
      warned_keys_ = true;
    }
    const fs::path path = key_path(folder, key, "metric");
    fs::create_directories(path.parent_path());
    char line[96];
    std::snprintf(line, sizeof(line), " %.17g %lld\n", value, static_cast<long long>(step));
    append_file(path.string(), stamp + line);
  }
  last_step_ = std::max(last_step_, step);
}

void MLflowLogger::log_hyperparams(const HParams& params) {
  open_run();
  const fs::path folder = fs::path(log_dir()) / "params";
  for (const auto& [key, value] : params) {
    const fs::path path = key_path(folder, key, "param");
    fs::create_directories(path.parent_path());
    replace_file(path.string(), value.str().substr(0, kParamLength));
  }
}

void MLflowLogger::finalize(const std::string& status) {
  if (!opened_) return;
  write_run_meta(status == "success" || status == "finished" ? kFinished : kFailed, now_ms());
}

void MLflowLogger::log_artifact(const std::string& local_path, const std::string& artifact_path) {
  open_run();
  const fs::path folder = fs::path(log_dir()) / "artifacts" / artifact_path;
  fs::create_directories(folder);
  std::ifstream in(local_path, std::ios::binary);
  LT_CHECK_VALUE(in.good(), "MLflowLogger::log_artifact: cannot read '", local_path, "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  replace_file((folder / fs::path(local_path).filename()).string(), bytes.str());
}

void MLflowLogger::continue_previous() {
  if (run_id_.empty() && options_.run_id().empty()) continue_newest_ = true;
}

void MLflowLogger::continue_version_of(const std::string& checkpoint) {
  // A checkpoint under <store>/<experiment id>/<run id>/...: that run.
  std::error_code ec;
  const fs::path store = fs::weakly_canonical(fs::absolute(store_), ec);
  const fs::path file = fs::weakly_canonical(fs::absolute(checkpoint), ec);
  const fs::path relative = file.lexically_relative(store);
  if (relative.empty() || *relative.begin() == "..") return;
  auto part = relative.begin();
  const std::string experiment = (part++)->string();
  if (part == relative.end()) return;
  const std::string run = part->string();
  if (fs::exists(store / experiment / run / "meta.yaml") && run_id_.empty()) experiment_id_ = experiment, run_id_ = run;
}

StateDict MLflowLogger::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("run_id", run_id());
  s.insert("step", last_step_);
  return s;
}

void MLflowLogger::load_state_dict(const StateDict& state) {
  // A checkpoint of another run: this run's log is a new one.
  if (!state.contains("run_id") || state.at("run_id").toStringRef() != run_id() || !state.contains("step")) return;
  last_step_ = state.at("step").toInt();
  // What the interrupted run logged after its checkpoint is logged again by
  // this one: drop it (TensorBoard's purge_step), so each step has one value.
  const fs::path folder = fs::path(log_dir()) / "metrics";
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::ifstream in(it->path());
    std::string kept;
    for (std::string line; std::getline(in, line);) {
      const size_t space = line.rfind(' ');
      if (space != std::string::npos && std::stoll(line.substr(space + 1)) <= last_step_) kept += line + "\n";
    }
    in.close();
    replace_file(it->path().string(), kept);
  }
}

}  // namespace lt
