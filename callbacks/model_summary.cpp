#include <lightning_cpp/callbacks/model_summary.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

namespace {

// Python's "{:,d}" of a non-negative integer.
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string type_name(const torch::nn::Module& m) {
  std::string name = m.name();
  if (const size_t colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

int64_t count(const std::vector<torch::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

}  // namespace

std::string human_readable_count(int64_t number) {
  LT_CHECK_VALUE(number >= 0, "human_readable_count: the number must be >= 0, got ", number);
  static const char* kLabels[] = {" ", "K", "M", "B", "T"};
  const int digits = number > 0 ? static_cast<int>(std::floor(std::log10(static_cast<double>(number)))) + 1 : 1;
  const int groups = std::min((digits + 2) / 3, 5);
  const double scaled = static_cast<double>(number) * std::pow(10.0, -3 * (groups - 1));
  const int index = groups - 1;
  if (index < 1 || scaled >= 100) return with_commas(static_cast<int64_t>(scaled)) + " " + kLabels[index];
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", scaled);  // below 100: no thousands to separate
  return std::string(buf) + " " + kLabels[index];
}

std::string summarize(const torch::nn::Module& module, int64_t max_depth) {
  std::vector<std::vector<std::string>> cols = {{" "}, {"Name"}, {"Type"}, {"Params"}, {"Mode"}};
  int64_t in_layers = 0;
  if (max_depth != 0) {
    size_t row = 0;
    for (const auto& item : module.named_modules("", /*include_self=*/false)) {
      const std::string& name = item.key();
      if (max_depth > 0 && std::count(name.begin(), name.end(), '.') >= max_depth) continue;
      const int64_t params = count(item.value()->parameters());
      if (std::count(name.begin(), name.end(), '.') == 0) in_layers += params;
      for (auto [col, value] : {std::pair{0, std::to_string(row++)}, {1, name}, {2, type_name(*item.value())},
                                {3, human_readable_count(params)},
                                {4, std::string(item.value()->is_training() ? "train" : "eval")}}) {
        cols[static_cast<size_t>(col)].push_back(value);
      }
    }
  }
  const auto params = module.parameters();
  const int64_t total = count(params);
  int64_t trainable = 0, bytes = 0;
  for (const auto& p : params) {
    if (p.requires_grad()) trainable += p.numel();
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  // Parameters of the model itself, in no child (Lightning's "other params").
  if (max_depth != 0 && total > in_layers) {
    for (auto [col, value] : {std::pair{0, std::string(" ")}, {1, std::string("other params")},
                              {2, std::string("n/a")}, {3, human_readable_count(total - in_layers)},
                              {4, std::string("n/a")}}) {
      cols[static_cast<size_t>(col)].push_back(value);
    }
  }
  std::vector<size_t> widths;
  size_t total_width = 3;  // 3 per column and one more, as Lightning counts
  for (const auto& col : cols) {
    size_t w = 0;
    for (const auto& cell : col) w = std::max(w, cell.size());
    widths.push_back(w);
    total_width += w + 3;
  }
  const auto pad = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
  std::string out;
  for (size_t row = 0; row < cols[0].size(); ++row) {
    for (size_t c = 0; c < cols.size(); ++c) out += (c ? " | " : "") + pad(cols[c][row], widths[c]);
    out += "\n";
    if (row == 0) out += std::string(total_width, '-') + "\n";
  }
  out += std::string(total_width, '-') + "\n";
  int64_t train_modules = module.is_training() ? 1 : 0, eval_modules = module.is_training() ? 0 : 1;
  for (const auto& m : module.modules(/*include_self=*/false)) (m->is_training() ? train_modules : eval_modules)++;
  char size[64];
  std::snprintf(size, sizeof(size), "%.3f", static_cast<double>(bytes) / 1e6);
  out += pad(human_readable_count(trainable), 10) + "Trainable params\n";
  out += pad(human_readable_count(total - trainable), 10) + "Non-trainable params\n";
  out += pad(human_readable_count(total), 10) + "Total params\n";
  out += pad(size, 10) + "Total estimated model params size (MB)\n";
  out += pad(std::to_string(train_modules), 10) + "Modules in train mode\n";
  out += pad(std::to_string(eval_modules), 10) + "Modules in eval mode";
  return out;
}

ModelSummary::ModelSummary(ModelSummaryOptions options) : options_(options) {
  {
    const ModelSummaryOptions& options = options_;
    const char* owner = "ModelSummary: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/callbacks/model_summary_options.def>
#undef LT_OPTION
  }
}

void ModelSummary::on_fit_start(Trainer& trainer, LightningModule& module) {
  if (options_.max_depth() == 0 || !trainer.is_global_zero()) return;
  rank_zero_info(summarize(module, options_.max_depth()));
}

}  // namespace lt
