#include <lightning_cpp/tuner/lr_finder.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

void LRFinderOptions::check(const char* owner) const {
  const LRFinderOptions& options = *this;
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/tuner/lr_finder_options.def>
#undef LT_OPTION
  LT_CHECK_VALUE(min_lr() < max_lr(), owner, "min_lr must be below max_lr, got ", min_lr(), " and ", max_lr());
}

LearningRateFinder::LearningRateFinder(LRFinderOptions options) : options_(std::move(options)) {
  options_.check("LearningRateFinder: ");
}

void LearningRateFinder::on_fit_start(Trainer& /*trainer*/, LightningModule& /*module*/) {
  throw ValueError(
      "LearningRateFinder: the sweep runs before fit, which a callback of the fit cannot do; in C++ call "
      "lt::Tuner(trainer).lr_find(model, data, options) before trainer.fit (tuner/tuning.h); in a config the "
      "lightning-cpp command runs it");
}

std::optional<int64_t> LRFinder::suggestion_index(int64_t skip_begin, int64_t skip_end) const {
  LT_CHECK_VALUE(skip_begin >= 0 && skip_end >= 0, "LRFinder::suggestion: skip_begin and skip_end must be >= 0, got ",
                 skip_begin, " and ", skip_end);
  std::vector<float> loss, lr;
  std::vector<int64_t> index;
  const int64_t n = static_cast<int64_t>(losses.size());
  for (int64_t i = skip_begin; i < n - skip_end; ++i) {
    if (!std::isfinite(static_cast<float>(losses[i]))) continue;
    loss.push_back(static_cast<float>(losses[i]));
    lr.push_back(static_cast<float>(lrs[i]));
    index.push_back(i);
  }
  if (loss.size() < 2) {
    rank_zero_warn("lr_find: no suggestion from ", loss.size(), " finite point(s) of ", n, " after skipping the first ",
                   skip_begin, " and the last ", skip_end,
                   "; give the sweep more steps (num_training) or more data (it stops at the data's end)");
    return std::nullopt;
  }
  // As Lightning: torch.gradient of the losses over the rates, in float32.
  const torch::Tensor l = torch::tensor(loss), x = torch::tensor(lr);
  const torch::Tensor gradient = torch::gradient(l, torch::TensorList{x}, c10::optional<int64_t>(0), 1)[0];
  return index[gradient.argmin().item<int64_t>()];
}

std::optional<double> LRFinder::suggestion(int64_t skip_begin, int64_t skip_end) const {
  const std::optional<int64_t> i = suggestion_index(skip_begin, skip_end);
  return i ? std::optional<double>(lrs[*i]) : std::nullopt;
}

namespace {

// 1, 2 or 5 times a power of ten, near `range / 5`: a tick step.
double tick_step(double range) {
  const double raw = range / 5;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw) return m * decade;
  }
  return 10 * decade;
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

std::string LRFinder::plot(const std::string& path, bool suggest) const {
  constexpr double kWidth = 640, kHeight = 440, kLeft = 80, kRight = 20, kTop = 40, kBottom = 60;
  const bool log_x = mode == "exponential";
  std::vector<std::pair<double, double>> points;  // (x, loss), finite only
  for (size_t i = 0; i < lrs.size() && i < losses.size(); ++i) {
    if (std::isfinite(losses[i]) && lrs[i] > 0) points.emplace_back(log_x ? std::log10(lrs[i]) : lrs[i], losses[i]);
  }
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const std::optional<int64_t> best = suggest ? suggestion_index() : std::nullopt;
  svg << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">lr_find ("
      << mode << ", " << lrs.size() << " steps)"
      << (best ? ": suggestion " + number(lrs[*best]) : std::string()) << "</text>\n";
  if (points.size() >= 2) {
    double x0 = points.front().first, x1 = x0, y0 = points.front().second, y1 = y0;
    for (const auto& [x, y] : points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
    if (log_x) x0 = std::floor(x0), x1 = std::ceil(x1);
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
    const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
    const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * w; };
    const auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * h; };
    svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << w << "\" height=\"" << h
        << "\" fill=\"none\" stroke=\"black\"/>\n";
    // x ticks: every decade (log), or evenly spaced.
    const double xs = log_x ? std::max(1.0, std::ceil((x1 - x0) / 10)) : tick_step(x1 - x0);
    for (double t = std::ceil(x0 / xs) * xs; t <= x1 + 1e-9 * xs; t += xs) {
      svg << "<line x1=\"" << px(t) << "\" y1=\"" << kTop + h << "\" x2=\"" << px(t) << "\" y2=\"" << kTop + h + 5
          << "\" stroke=\"black\"/><text x=\"" << px(t) << "\" y=\"" << kTop + h + 18 << "\" text-anchor=\"middle\">"
          << (log_x ? "1e" + number(t) : number(t)) << "</text>\n";
    }
    const double ys = tick_step(y1 - y0);
    for (double t = std::ceil(y0 / ys) * ys; t <= y1; t += ys) {
      svg << "<line x1=\"" << kLeft - 5 << "\" y1=\"" << py(t) << "\" x2=\"" << kLeft << "\" y2=\"" << py(t)
          << "\" stroke=\"black\"/><text x=\"" << kLeft - 8 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">"
          << number(t) << "</text>\n";
    }
    svg << "<text x=\"" << kLeft + w / 2 << "\" y=\"" << kHeight - 16 << "\" text-anchor=\"middle\">Learning rate"
        << (log_x ? " (log scale)" : "") << "</text>\n"
        << "<text x=\"18\" y=\"" << kTop + h / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
        << kTop + h / 2 << ")\">Loss</text>\n<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : points) svg << px(x) << "," << py(y) << " ";
    svg << "\"/>\n";
    if (best) {
      const double x = log_x ? std::log10(lrs[*best]) : lrs[*best];
      svg << "<circle cx=\"" << px(x) << "\" cy=\"" << py(losses[*best]) << "\" r=\"6\" fill=\"red\"/>\n";
    }
  } else {
    svg << "<text x=\"" << kWidth / 2 << "\" y=\"" << kHeight / 2 << "\" text-anchor=\"middle\">fewer than 2 finite "
        << "points to plot</text>\n";
  }
  svg << "</svg>\n";
  if (!path.empty()) {
    std::ofstream out(path);
    out << svg.str();
    LT_CHECK_VALUE(out.good(), "LRFinder::plot: could not write '", path, "'");
  }
  return svg.str();
}

}  // namespace lt
