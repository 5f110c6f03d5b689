#include <lightning_cpp/callbacks/model_checkpoint.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

namespace fs = std::filesystem;

namespace {

// A checkpoint of this callback's folder: a .ckpt file, or a sharded checkpoint's folder.
bool is_checkpoint(const fs::directory_entry& entry) {
  std::error_code ec;
  return entry.path().extension() == ModelCheckpoint::kFileExtension &&
         (entry.is_regular_file(ec) || is_sharded_checkpoint(entry.path().string()));
}

// Python's format(value, spec) for the specs checkpoint names use: an
// optional [0][width][.precision] and a type among d, e, f, g (or none).
std::string format_value(double value, bool is_int, const std::string& spec) {
  static const std::regex kSpec(R"(^(0?)(\d*)(?:\.(\d+))?([defgEFG]?)$)");
  std::smatch m;
  LT_CHECK_VALUE(std::regex_match(spec, m, kSpec), "ModelCheckpoint: unsupported format spec ':", spec,
                 "' in filename (use e.g. :.2f, :03d, :.3e)");
  std::string type = m[4];
  if (type.empty()) type = is_int ? "d" : (m[3].length() > 0 ? "g" : "");
  char buf[128];
  if (type.empty()) {
    // Python's repr of a float: the shortest form that reads back exactly.
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
      if (std::strtod(buf, nullptr) == value) break;
    }
    std::string s = buf;
    if (std::isfinite(value) && s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
  }
  const std::string flags = std::string(m[1]) + std::string(m[2]) + (m[3].length() ? "." + std::string(m[3]) : "");
  if (type == "d") {
    std::snprintf(buf, sizeof(buf), ("%" + flags + "lld").c_str(), static_cast<long long>(std::llround(value)));
  } else {
    std::snprintf(buf, sizeof(buf), ("%" + flags + type).c_str(), value);
  }
  return buf;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  for (const std::string* path : {&options_.dirpath(), &options_.filename()}) {
    LT_CHECK_VALUE(path->find('\0') == std::string::npos, "ModelCheckpoint: ",
                   path == &options_.dirpath() ? "dirpath" : "filename", " '", path->substr(0, path->find('\0')),
                   "\\0...' contains a NUL byte");
  }
  {
    const ModelCheckpointOptions& options = options_;
    const char* owner = "ModelCheckpoint: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/callbacks/model_checkpoint_options.def>
#undef LT_OPTION
  }
  LT_CHECK_VALUE(options_.monitor().empty() == false || options_.save_top_k() == -1 || options_.save_top_k() <= 1,
                 "ModelCheckpoint: save_top_k=", options_.save_top_k(),
                 " needs a monitor (without one, only 0, 1 or -1 make sense)");
  if (options_.every_n_epochs()) {
    every_n_epochs_ = *options_.every_n_epochs();
  } else {
    every_n_epochs_ = options_.every_n_train_steps() > 0 ? 0 : 1;
  }
  dirpath_ = options_.dirpath();
}

std::string ModelCheckpoint::state_key() const {
  return c10::str("ModelCheckpoint{'monitor': ", options_.monitor().empty() ? "None" : "'" + options_.monitor() + "'",
                  ", 'mode': '", options_.mode(), "', 'every_n_train_steps': ", options_.every_n_train_steps(),
                  ", 'every_n_epochs': ", every_n_epochs_, "}");
}

JoinSupport ModelCheckpoint::join_support(const TrainerOptions& /*options*/) const {
  if (options_.every_n_train_steps() < 1) return JoinSupport::compatible();
  return JoinSupport::needs_lockstep(
      c10::str("ModelCheckpoint(every_n_train_steps=", options_.every_n_train_steps(),
               ") saves after optimizer steps, with a barrier every rank must reach, a rank that ran out of data "
               "too"),
      "use join_mode: lockstep (the default) with automatic optimization, every_n_epochs, or uneven_inputs: pad");
}

void ModelCheckpoint::setup(Trainer& trainer, LightningModule& /*module*/, Stage /*stage*/) {
  if (dirpath_.empty()) dirpath_ = (fs::path(trainer.log_dir()) / "checkpoints").string();
  if (!trainer.is_global_zero()) return;
  // What an earlier run's writer left when it was killed mid-save.
  const std::vector<std::string> removed = remove_stale_temporaries(dirpath_);
  if (!removed.empty()) {
    rank_zero_warn("ModelCheckpoint: removed ", removed.size(), " temporary file(s) that checkpoint writers left in '",
                   dirpath_, "' when they died (e.g. ", fs::path(removed.front()).filename().string(), ")");
  }
}

std::set<std::string> ModelCheckpoint::kept_files() const {
  std::set<std::string> names;
  for (const auto& [path, score] : best_k_models_) names.insert(fs::path(path).filename().string());
  for (const std::string* path : {&best_model_path_, &last_model_path_}) {
    if (!path->empty()) names.insert(fs::path(*path).filename().string());
  }
  return names;
}

void ModelCheckpoint::on_train_start(Trainer& trainer, LightningModule& /*module*/) {
  if (!trainer.is_global_zero() || trainer.options().fast_dev_run() > 0) return;
  std::set<std::string> kept;
  bool first = true;
  for (const auto& callback : trainer.callbacks()) {
    const auto* other = dynamic_cast<const ModelCheckpoint*>(callback.get());
    if (other == nullptr || other->dirpath_ != dirpath_) continue;
    if (other->options_.save_top_k() < 1) return;  // keeps every file it writes (or none)
    if (first && other != this) return;             // the first one of the folder reports
    first = false;
    const auto names = other->kept_files();
    kept.insert(names.begin(), names.end());
  }
  std::vector<std::string> orphans;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dirpath_, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_checkpoint(entry) && kept.count(name) == 0) {
      orphans.push_back(name);
    }
  }
  if (orphans.empty()) return;
  std::sort(orphans.begin(), orphans.end());
  std::string listed;
  for (size_t i = 0; i < orphans.size() && i < 5; ++i) listed += (i ? ", " : "") + orphans[i];
  if (orphans.size() > 5) listed += ", ...";
  rank_zero_warn("ModelCheckpoint: ", orphans.size(), " checkpoint file(s) in '", dirpath_,
                 "' are not among the checkpoints this run keeps (an earlier run's, or left by a run killed between "
                 "saving a checkpoint and removing the one it replaced); they count toward no top-",
                 options_.save_top_k(), " and are never removed: ", listed);
}

std::map<std::string, double> ModelCheckpoint::monitor_candidates(const Trainer& trainer) const {
  auto candidates = trainer.callback_metrics();
  candidates["epoch"] = static_cast<double>(trainer.current_epoch());
  candidates["step"] = static_cast<double>(trainer.global_step());
  return candidates;
}

std::string ModelCheckpoint::format_checkpoint_name(const std::map<std::string, double>& metrics,
                                                    const std::string& filename, int version) const {
  std::string tmpl = filename.empty() ? (options_.filename().empty() ? "{epoch}-{step}" : options_.filename())
                                      : filename;
  static const std::regex kField(R"(\{([^{}:]+)(?::([^{}]*))?\})");
  std::string out;
  auto begin = std::sregex_iterator(tmpl.begin(), tmpl.end(), kField);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += tmpl.substr(last, m.position(0) - last);
    const std::string key = m[1];
    auto v = metrics.find(key);
    const double value = v == metrics.end() ? 0.0 : v->second;  // Lightning formats a missing metric as 0
    const bool is_int = key == "epoch" || key == "step";
    if (options_.auto_insert_metric_name()) out += key + "=";
    out += format_value(value, is_int, m[2]);
    last = m.position(0) + m.length(0);
  }
  out += tmpl.substr(last);
  if (version > 0) out += "-v" + std::to_string(version);
  return out + kFileExtension;
}

// After the batch's step (Lightning saves in on_train_batch_end); under
// lockstep Join a rank that ran out of data runs it too (see core/callback.h).
void ModelCheckpoint::on_after_optimizer_step(Trainer& trainer, LightningModule& /*module*/) {
  const int64_t n = options_.every_n_train_steps();
  if (n < 1 || trainer.global_step() == 0 || trainer.global_step() % n != 0) return;
  save(trainer);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, LightningModule& /*module*/) {
  if (every_n_epochs_ < 1 || (trainer.current_epoch() + 1) % every_n_epochs_ != 0) return;
  save(trainer);
}

void ModelCheckpoint::save(Trainer& trainer) {
  if (trainer.state().sanity_checking || trainer.state().stage != Stage::kTrain) return;
  if (trainer.options().fast_dev_run() > 0) return;  // Lightning's: checkpointing is suppressed
  // Accumulation leaves global_step unchanged across micro-batches; the epoch
  // end may coincide with a step save.
  if (last_global_step_saved_ == trainer.global_step()) return;
  const auto candidates = monitor_candidates(trainer);
  save_topk(trainer, candidates);
  save_last(trainer, candidates);
}

void ModelCheckpoint::save_topk(Trainer& trainer, const std::map<std::string, double>& candidates) {
  if (options_.save_top_k() == 0) return;
  if (options_.monitor().empty()) return save_unmonitored(trainer, candidates);
  auto it = candidates.find(options_.monitor());
  if (it == candidates.end()) {
    std::string keys;
    for (const auto& kv : candidates) keys += (keys.empty() ? "" : ", ") + kv.first;
    const std::string what =
        c10::str("ModelCheckpoint(monitor='", options_.monitor(), "') could not find the monitored key in the logged ",
                 "metrics: ", keys.empty() ? "(none)" : keys, ". Did you call log('", options_.monitor(),
                 "', value) in the LightningModule?");
    // As Lightning: before the first validation a key logged there cannot exist yet, so the save is skipped
    // (top-k; last is still saved) with a warning, once; after one, the key is missing for good.
    if (trainer.state().validations_run > 0) throw ValueError(what);
    if (!warned_missing_monitor_) {
      warned_missing_monitor_ = true;
      rank_zero_warn(what, " No top-k checkpoint is saved until it is logged (global step ", trainer.global_step(),
                     ", before the first validation)");
    }
    return;
  }
  save_monitored(trainer, candidates, it->second);
}

void ModelCheckpoint::save_monitored(Trainer& trainer, const std::map<std::string, double>& candidates,
                                     double current) {
  const int64_t top_k = options_.save_top_k();
  const bool room = top_k == -1 || static_cast<int64_t>(best_k_models_.size()) < top_k;
  // Each rank judges its own value (a metric logged without sync_dist
  // differs by rank); every rank must then save or not, alike (Lightning:
  // reduce_boolean_decision), or one would wait in the save's barrier alone.
  const bool keep =
      room || trainer.strategy().reduce_boolean_decision(better(current, best_k_models_.at(kth_best_model_path_)));
  if (!keep) {
    if (options_.verbose() && trainer.is_global_zero()) {
      rank_zero_info("Epoch ", trainer.current_epoch(), ", global step ", trainer.global_step(), ": '",
                     options_.monitor(), "' was not in top ", top_k);
    }
    return;
  }
  const size_t k = top_k == -1 ? best_k_models_.size() + 1 : static_cast<size_t>(top_k);
  std::string to_delete;
  if (best_k_models_.size() == k && k > 0) {
    to_delete = kth_best_model_path_;
    best_k_models_.erase(to_delete);
  }
  // A NaN never beats anything: rank it as the worst value.
  if (std::isnan(current)) {
    current = options_.mode() == "min" ? std::numeric_limits<double>::infinity()
                                       : -std::numeric_limits<double>::infinity();
  }
  const std::string path = unique_path(candidates, to_delete);
  best_k_models_[path] = current;
  if (best_k_models_.size() == k) {
    // kth = the worst kept: max for "min", min for "max".
    auto worst = best_k_models_.begin();
    for (auto it = best_k_models_.begin(); it != best_k_models_.end(); ++it) {
      if (better(worst->second, it->second)) worst = it;
    }
    kth_best_model_path_ = worst->first;
    kth_value_ = worst->second;
  }
  auto best = best_k_models_.begin();
  for (auto it = best_k_models_.begin(); it != best_k_models_.end(); ++it) {
    if (better(it->second, best->second)) best = it;
  }
  best_model_path_ = best->first;
  best_model_score_ = best->second;
  if (options_.verbose() && trainer.is_global_zero()) {
    rank_zero_info("Epoch ", trainer.current_epoch(), ", global step ", trainer.global_step(), ": '",
                   options_.monitor(), "' reached ", current, " (best ", *best_model_score_, "), saving model to '",
                   path, "' as top ", k);
  }
  write(trainer, path);
  if (!to_delete.empty() && to_delete != path) remove(trainer, to_delete);
}

void ModelCheckpoint::save_unmonitored(Trainer& trainer, const std::map<std::string, double>& candidates) {
  const std::string path = unique_path(candidates, best_model_path_);
  const std::string previous = best_model_path_;
  best_model_path_ = path;
  write(trainer, path);
  if (options_.save_top_k() == 1 && !previous.empty() && previous != path) remove(trainer, previous);
}

void ModelCheckpoint::save_last(Trainer& trainer, const std::map<std::string, double>& candidates) {
  if (!options_.save_last()) return;
  const std::string path = (fs::path(dirpath_) / format_checkpoint_name(candidates, kNameLast)).string();
  last_model_path_ = path;
  write(trainer, path);
}

std::string ModelCheckpoint::unique_path(const std::map<std::string, double>& candidates,
                                         const std::string& replaceable) const {
  // Bounded: a name the file system maps to one file whatever the version
  // (a NUL byte in it) would otherwise never find a free one.
  constexpr int kMaxVersions = 10000;
  std::string path = (fs::path(dirpath_) / format_checkpoint_name(candidates)).string();
  for (int version = 1; fs::exists(path) && path != replaceable; ++version) {
    LT_CHECK(version <= kMaxVersions, "ModelCheckpoint: no free file name after ", kMaxVersions, " versions of '",
             path, "' in '", dirpath_, "'");
    path = (fs::path(dirpath_) / format_checkpoint_name(candidates, {}, version)).string();
  }
  return path;
}

void ModelCheckpoint::write(Trainer& trainer, const std::string& path) {
  if (trainer.is_global_zero()) fs::create_directories(fs::path(path).parent_path());
  last_global_step_saved_ = trainer.global_step();
  trainer.save_checkpoint(path);
}

void ModelCheckpoint::remove(Trainer& trainer, const std::string& path) {
  trainer.strategy().remove_checkpoint(path);  // global rank 0, through the strategy's CheckpointIO
}

std::string ModelCheckpoint::checkpoint_path(const std::string& which) const {
  if (which == "best" && !best_model_path_.empty()) return best_model_path_;
  if (dirpath_.empty() || (which != "last" && which != "best")) return {};
  std::error_code ec;
  std::string newest;
  fs::file_time_type newest_time;
  for (const auto& entry : fs::directory_iterator(dirpath_, ec)) {
    if (!is_checkpoint(entry)) continue;
    // A sharded checkpoint's folder: when its meta.pt was written.
    const auto time = fs::last_write_time(entry.is_directory(ec) ? entry.path() / "meta.pt" : entry.path(), ec);
    if (newest.empty() || time > newest_time) {
      newest = entry.path().string();
      newest_time = time;
    }
  }
  if (which == "last" || newest.empty()) return newest;
  // In a new process (validate with ckpt_path best): the best model as the
  // newest checkpoint's state of this callback names it.
  const auto ckpt = pickle_load_file(newest, /*placeholders=*/true).toGenericDict();  // its callbacks' state only
  if (!ckpt.contains("callbacks")) return {};
  const auto states = ckpt.at("callbacks").toGenericDict();
  if (!states.contains(state_key())) return {};
  return states.at(state_key()).toGenericDict().at("best_model_path").toStringRef();
}

StateDict ModelCheckpoint::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("monitor", options_.monitor());
  s.insert("dirpath", dirpath_);
  s.insert("best_model_path", best_model_path_);
  if (best_model_score_) s.insert("best_model_score", *best_model_score_);
  s.insert("kth_best_model_path", kth_best_model_path_);
  s.insert("kth_value", kth_value_);
  s.insert("last_model_path", last_model_path_);
  c10::Dict<std::string, double> best_k;
  for (const auto& [path, score] : best_k_models_) best_k.insert(path, score);
  s.insert("best_k_models", best_k);
  return s;
}

void ModelCheckpoint::load_state_dict(const StateDict& state) {
  // As Lightning: the top-k bookkeeping only carries over into the same folder.
  const std::string dirpath = state.contains("dirpath") ? state.at("dirpath").toStringRef() : std::string();
  if (dirpath != dirpath_) return;
  best_model_path_ = state.at("best_model_path").toStringRef();
  if (state.contains("best_model_score")) best_model_score_ = state.at("best_model_score").toDouble();
  kth_best_model_path_ = state.at("kth_best_model_path").toStringRef();
  kth_value_ = state.at("kth_value").toDouble();
  last_model_path_ = state.at("last_model_path").toStringRef();
  best_k_models_.clear();
  for (const auto& kv : state.at("best_k_models").toGenericDict()) {
    best_k_models_[kv.key().toStringRef()] = kv.value().toDouble();
  }
}

}  // namespace lt
