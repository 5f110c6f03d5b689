#include <lightning_cpp/loggers/csv.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/loggers/utilities.h>

namespace lt {

namespace fs = std::filesystem;

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The fields of one line as csv_field writes them.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}
}  // namespace

CSVLogger::CSVLogger(CSVLoggerOptions options)
    : options_(std::move(options)),
      folder_("CSVLogger", options_.save_dir(), options_.name(), options_.version()) {
  {
    const CSVLoggerOptions& options = options_;
    const char* owner = "CSVLogger: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_OPTION_WITH LT_OPTION_WITH_CHECK
#include <lightning_cpp/loggers/csv_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
  }
}

CSVLogger::~CSVLogger() {
  try {
    save();
  } catch (...) {
  }
}

int64_t CSVLogger::version() const { return folder_.version(); }

void CSVLogger::continue_previous() {
  folder_.continue_previous();
  if (rows_.empty() && !header_written_) read_metrics();
}

void CSVLogger::continue_version_of(const std::string& checkpoint) {
  if (folder_.continue_version_of(checkpoint) && rows_.empty() && !header_written_) read_metrics();
}

StateDict CSVLogger::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("version", version());
  s.insert("rows", static_cast<int64_t>(rows_.size()));
  return s;
}

void CSVLogger::load_state_dict(const StateDict& state) {
  // A checkpoint of another version: this run's folder is a new log.
  if (!state.contains("version") || state.at("version").toInt() != version()) return;
  if (rows_.empty() && !header_written_) read_metrics();
  const auto rows = static_cast<size_t>(state.at("rows").toInt());
  if (rows_.size() <= rows) return;
  // Rows logged after the checkpoint are logged again by the resumed run.
  rows_.resize(rows);
  rows_written_ = 0;
  header_written_ = false;
  if (rows_.empty()) {
    std::error_code ec;
    fs::remove(fs::path(log_dir()) / kMetricsFile, ec);
  } else {
    write_metrics();
  }
}

void CSVLogger::read_metrics() {
  std::ifstream in(fs::path(log_dir()) / kMetricsFile);
  std::string line;
  if (!in || !std::getline(in, line)) return;
  keys_ = csv_fields(line);
  while (std::getline(in, line)) {
    const std::vector<std::string> fields = csv_fields(line);
    Row row{0, {}};
    for (size_t i = 0; i < keys_.size() && i < fields.size(); ++i) {
      if (keys_[i] == "step") {
        row.step = std::strtoll(fields[i].c_str(), nullptr, 10);
      } else if (!fields[i].empty()) {
        row.values[keys_[i]] = std::strtod(fields[i].c_str(), nullptr);
      }
    }
    rows_.push_back(std::move(row));
  }
  rows_written_ = rows_.size();
  header_written_ = true;
}

std::string CSVLogger::log_dir() const { return folder_.path(); }

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  rows_.push_back(Row{step, metrics});
  if (static_cast<int64_t>(rows_.size() - rows_written_) >= options_.flush_logs_every_n_steps()) write_metrics();
}

void CSVLogger::log_hyperparams(const HParams& params) {
  for (const auto& [k, v] : params) hparams_[k] = v;
  fs::create_directories(log_dir());
  save_hparams_to_yaml((fs::path(log_dir()) / kHparamsFile).string(), hparams_);
}

void CSVLogger::write_metrics() {
  if (rows_written_ == rows_.size()) return;
  std::set<std::string> keys(keys_.begin(), keys_.end());
  keys.insert("step");
  for (size_t i = rows_written_; i < rows_.size(); ++i) {
    for (const auto& kv : rows_[i].values) keys.insert(kv.first);
  }
  const bool new_keys = keys.size() != keys_.size();
  keys_.assign(keys.begin(), keys.end());
  fs::create_directories(log_dir());
  const fs::path path = fs::path(log_dir()) / kMetricsFile;
  // A new column means a new header: rewrite the file, as Lightning does.
  const bool rewrite = new_keys || !header_written_;
  std::ostringstream f;
  if (rewrite) {
    for (size_t i = 0; i < keys_.size(); ++i) f << (i ? "," : "") << csv_field(keys_[i]);
    f << "\n";
    header_written_ = true;
  }
  for (size_t r = rewrite ? 0 : rows_written_; r < rows_.size(); ++r) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (i) f << ",";
      if (keys_[i] == "step") {
        f << rows_[r].step;
      } else if (auto it = rows_[r].values.find(keys_[i]); it != rows_[r].values.end()) {
        // The epoch the Trainer adds is an integer, as in Lightning's file.
        const double v = it->second;
        const bool integer = keys_[i] == "epoch" && std::nearbyint(v) == v && std::abs(v) < 1e15;
        f << (integer ? std::to_string(static_cast<int64_t>(v)) : float_repr(v));
      }
    }
    f << "\n";
  }
  // A failure (a full disk) stops the run naming the file; the rows stay
  // unwritten, and the file is as it was.
  if (rewrite) {
    replace_file(path.string(), f.str());
  } else {
    append_file(path.string(), f.str());
  }
  rows_written_ = rows_.size();
}

void CSVLogger::save() { write_metrics(); }

void CSVLogger::finalize(const std::string& /*status*/) { save(); }

}  // namespace lt
