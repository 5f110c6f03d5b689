#include <lightning_cpp/core/profiler.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

// -- SimpleProfiler ---------------------------------------------------------------------------------

void SimpleProfiler::start(const std::string& action) {
  const bool started = running_.emplace(action, Clock::now()).second;
  LT_INTERNAL_ASSERT(started, "SimpleProfiler: action '", action, "' started while it runs");
}

void SimpleProfiler::stop(const std::string& action) {
  const auto it = running_.find(action);
  LT_INTERNAL_ASSERT(it != running_.end(), "SimpleProfiler: action '", action, "' stopped but never started");
  Stats& s = stats_[action];
  ++s.calls;
  s.total_s += std::chrono::duration<double>(Clock::now() - it->second).count();
  running_.erase(it);
}

void SimpleProfiler::setup(Stage stage, int64_t rank, const std::string& /*log_dir*/) {
  stats_.clear();
  running_.clear();
  stage_ = stage;
  rank_ = rank;
  stage_start_ = Clock::now();
}

void SimpleProfiler::teardown(Stage /*stage*/) {
  if (rank_ != 0 && !options_.per_rank) return;
  if (rank_ == 0) {
    rank_zero_info(summary());
  } else {
    std::fprintf(stdout, "%s\n", summary().c_str());
    std::fflush(stdout);
  }
}

std::string SimpleProfiler::summary() const {
  const double total = std::chrono::duration<double>(Clock::now() - stage_start_).count();
  std::vector<std::pair<std::string, Stats>> rows(stats_.begin(), stats_.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.total_s > b.second.total_s; });
  size_t width = 6;  // "Action"
  for (const auto& [action, s] : rows) width = std::max(width, action.size());
  const auto row = [&](const std::string& action, const std::string& mean, const std::string& calls,
                       const std::string& total_s, const std::string& percent) {
    char buf[64];
    std::string out = "|  " + action + std::string(width - action.size(), ' ');
    for (const auto& [cell, w] : {std::pair{mean, 19}, {calls, 11}, {total_s, 16}, {percent, 14}}) {
      std::snprintf(buf, sizeof(buf), "  |  %-*s", w, cell.c_str());
      out += buf;
    }
    return out + "  |\n";
  };
  const std::string header = row("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %");
  const std::string rule(header.size() - 1, '-');
  std::string title = stage_ == Stage::kTrain ? "FIT" : stage_name(stage_);
  std::transform(title.begin(), title.end(), title.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string out = c10::str(title, " Profiler Report", rank_ != 0 ? c10::str(" (rank ", rank_, ")") : "",
                             "\n\n", rule, "\n", header, rule, "\n");
  int64_t calls = 0;
  for (const auto& [action, s] : rows) calls += s.calls;
  const auto num = [](const char* format, double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), format, v);
    return std::string(buf);
  };
  out += row("Total", "-", std::to_string(calls), num("%.5g", total), "100 %");
  out += rule + "\n";
  for (const auto& [action, s] : rows) {
    out += row(action, num("%.5g", s.total_s / static_cast<double>(s.calls)), std::to_string(s.calls),
               num("%.5g", s.total_s), num("%.5g", total > 0 ? 100.0 * s.total_s / total : 0.0));
  }
  return out + rule;
}

// -- TorchProfiler ----------------------------------------------------------------------------------

TorchProfiler::TorchProfiler() = default;
TorchProfiler::~TorchProfiler() = default;

void TorchProfiler::setup(Stage stage, int64_t rank, const std::string& log_dir) {
  std::filesystem::create_directories(log_dir);
  trace_file_ = (std::filesystem::path(log_dir) / c10::str(stage_name(stage), "-trace-rank", rank, ".json")).string();
  running_.clear();
  recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_file_);
}

void TorchProfiler::teardown(Stage /*stage*/) {
  running_.clear();
  recording_.reset();  // writes the trace
}

void TorchProfiler::start(const std::string& action) {
  if (!recording_) return;
  auto scope = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (scope->isActive()) scope->before(action);
  running_[action] = std::move(scope);
}

void TorchProfiler::stop(const std::string& action) { running_.erase(action); }

}  // namespace lt
