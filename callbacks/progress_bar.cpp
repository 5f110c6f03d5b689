#include <lightning_cpp/callbacks/progress_bar.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(options) {
  {
    const ProgressBarOptions& options = options_;
    const char* owner = "ProgressBar: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/progress_bar_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
  }
  tty_ = options_.tty() ? *options_.tty() : ::isatty(STDOUT_FILENO) == 1;
}

std::ostream& ProgressBar::out() const { return options_.stream() ? *options_.stream() : std::cout; }

size_t ProgressBar::columns() const {
  int64_t cols = options_.width().value_or(0);
  winsize size{};
  if (cols <= 0 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) cols = size.ws_col;
  if (cols <= 0) {
    const char* env = std::getenv("COLUMNS");
    cols = env != nullptr ? std::atoll(env) : 0;
  }
  return static_cast<size_t>(cols > 10 ? cols : 80);
}

std::string ProgressBar::format_time(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

std::string ProgressBar::metrics_str(const Trainer& trainer) const {
  std::string s;
  for (const auto& [k, v] : trainer.state().progress_bar_metrics) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g", v);
    s += ", " + k + "=" + buf;
  }
  return s;
}

void ProgressBar::on_train_start(Trainer& trainer, LightningModule&) {
  enabled_ = trainer.is_global_zero();
  max_epochs_ = trainer.options().resolved_max_epochs();
}

void ProgressBar::on_train_epoch_start(Trainer& trainer, LightningModule&) {
  epoch_start_ = Clock::now();
  epoch_first_ = trainer.state().resume_iteration;  // a resumed epoch starts there (0 otherwise)
  last_draw_ = {};
  last_width_ = 0;
}

void ProgressBar::draw(const Trainer& trainer, int64_t done, int64_t total, bool final) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  // Batches run in this process: a resumed epoch's skipped ones are not.
  const int64_t ran = std::max<int64_t>(done - epoch_first_, 0);
  const double rate = elapsed > 0 ? static_cast<double>(ran) / elapsed : 0.0;
  const double eta = rate > 0 && total >= 0 ? static_cast<double>(total - done) / rate : -1.0;
  const std::string of = total >= 0 ? std::to_string(total) : "?";  // a stream of unknown length
  const std::string epoch =
      max_epochs_ > 0 ? c10::str(trainer.current_epoch(), "/", max_epochs_ - 1) : c10::str(trainer.current_epoch());
  char rate_buf[32];
  std::snprintf(rate_buf, sizeof(rate_buf), "%.2fit/s", rate);
  if (!tty_) {
    out() << "Epoch " << epoch << ": " << done << "/" << of << " batches [" << format_time(elapsed) << ", "
          << rate_buf << metrics_str(trainer) << "]" << std::endl;
    return;
  }
  // The bar takes up to 20 columns of what the line leaves; the line itself
  // stops one column short of the terminal's edge (a full line wraps).
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  char pct[8];
  std::snprintf(pct, sizeof(pct), "%3d%%", static_cast<int>(frac * 100));
  const std::string head = c10::str("Epoch ", epoch, ": ", pct, "|");
  const std::string tail = c10::str("| ", done, "/", of, " [", format_time(elapsed), "<", format_time(eta), ", ",
                                    rate_buf, metrics_str(trainer), "]");
  const size_t limit = columns() - 1;
  const size_t room = limit > head.size() + tail.size() ? limit - head.size() - tail.size() : 0;
  const size_t bar = std::min<size_t>(room, 20);
  const auto filled = static_cast<size_t>(frac * static_cast<double>(bar));
  std::string line = head + std::string(filled, '#') + std::string(bar - filled, ' ') + tail;
  if (line.size() > limit) line.resize(limit);
  const size_t width = line.size();
  if (width < last_width_) line += std::string(last_width_ - width, ' ');
  last_width_ = width;
  out() << "\r" << line << (final ? "\n" : "") << std::flush;
}

void ProgressBar::on_train_batch_end(Trainer& trainer, LightningModule&, const torch::Tensor&, const Batch&,
                                     int64_t batch_idx) {
  redraw(trainer, batch_idx + 1);
}

void ProgressBar::on_after_optimizer_step(Trainer& trainer, LightningModule&) {
  redraw(trainer, trainer.state().epoch_iteration);
}

namespace {
// The last window's padding micro-batches (Join) are iterations, not batches: the count stops at the epoch's length.
int64_t batches_done(int64_t iterations, int64_t total) { return total >= 0 ? std::min(iterations, total) : iterations; }
}  // namespace

void ProgressBar::redraw(const Trainer& trainer, int64_t iterations) {
  if (!enabled_ || !tty_) return;
  const int64_t total = trainer.state().epoch_length;
  const int64_t done = batches_done(iterations, total);
  // Redrawing costs a write; at thousands of it/s, at most ~10 redraws a second.
  const auto now = Clock::now();
  if (done % options_.refresh_rate() != 0 && done != total) return;
  if (now - last_draw_ < std::chrono::milliseconds(100) && done != total) return;
  last_draw_ = now;
  draw(trainer, done, total, false);
}

void ProgressBar::on_train_epoch_end(Trainer& trainer, LightningModule&) {
  if (!enabled_) return;
  // The iterations the epoch ran (all of them, or up to a stop), of the epoch's length.
  const int64_t total = trainer.state().epoch_length;
  draw(trainer, batches_done(trainer.state().epoch_iteration, total), total, true);
}

void ProgressBar::on_test_end(Trainer& trainer, LightningModule&) {
  if (!trainer.is_global_zero()) return;
  std::string s;
  for (const auto& [k, v] : trainer.callback_metrics()) {
    if (k.rfind("test_", 0) == 0) s += c10::str(s.empty() ? "" : ", ", k, "=", v);
  }
  if (!s.empty()) out() << "Test: " << s << std::endl;
}

}  // namespace lt
