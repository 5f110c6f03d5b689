#include <lightning_cpp/data/internal/loader_workers.h>

#include <algorithm>
#include <string>

#include <c10/util/StringUtil.h>
#include <torch/utils.h>

#include <lightning_cpp/data/internal/exception_context.h>

namespace lt {

using detail::with_context;

namespace {

// "samples 28..31", "sample 5", or the first few of a shuffled batch.
std::string describe_samples(const std::vector<int64_t>& s) {
  if (s.size() == 1) return c10::str("sample ", s[0]);
  bool ascending_run = true;
  for (size_t k = 1; k < s.size() && ascending_run; ++k) ascending_run = s[k] == s[k - 1] + 1;
  if (ascending_run) return c10::str("samples ", s.front(), "..", s.back());
  constexpr size_t kShown = 8;
  std::string out = "samples ";
  for (size_t k = 0; k < std::min(s.size(), kShown); ++k) out += c10::str(k ? ", " : "", s[k]);
  if (s.size() > kShown) out += c10::str(", ... (", s.size(), " in all)");
  return out;
}

}  // namespace

Batch DataLoader::Workers::get(int64_t batch_idx, std::vector<int64_t> indices, int64_t epoch_size) {
  std::lock_guard<std::mutex> consumer(consumer_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (threads_.empty()) {
    threads_.reserve(static_cast<size_t>(num_workers_));
    for (int64_t w = 0; w < num_workers_; ++w) threads_.emplace_back([this] { run(); });
  }
  // A batch ahead in the window is served from it; any other index restarts
  // the window there (a resumed epoch, a limit, a second validation pass).
  while (!window_.empty() && window_.front()->batch_idx < batch_idx) window_.pop_front();
  if (!window_.empty() && window_.front()->batch_idx != batch_idx) window_.clear();
  if (window_.empty()) window_.push_back(make_slot(batch_idx, std::move(indices)));
  const int64_t end = std::min(epoch_size, batch_idx + 1 + window_size_);
  for (int64_t next = window_.back()->batch_idx + 1; next < end; ++next) {
    window_.push_back(make_slot(next, loader_.batch_indices(next)));
  }
  work_cv_.notify_all();
  std::shared_ptr<Slot> slot = window_.front();
  done_cv_.wait(lock, [&] { return slot->done; });
  window_.pop_front();
  lock.unlock();
  if (slot->error) std::rethrow_exception(slot->error);
  return std::move(slot->batch);
}

void DataLoader::Workers::stop() {
  std::lock_guard<std::mutex> consumer(consumer_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    window_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
}

void DataLoader::Workers::run() {
  // Batches are inputs: no autograd. (Not InferenceMode: its tensors cannot be
  // saved for backward by the training step.)
  torch::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::shared_ptr<Slot> slot;
    work_cv_.wait(lock, [&] {
      if (stop_) return true;
      for (const auto& s : window_) {
        if (!s->started) {
          slot = s;
          return true;
        }
      }
      return false;
    });
    if (stop_) return;
    slot->started = true;
    lock.unlock();
    Batch batch;
    std::exception_ptr error;
    try {
      batch = loader_.load(slot->indices);
    } catch (...) {
      error = with_context(std::current_exception(), c10::str("DataLoader worker: epoch ", slot->epoch, ", batch ",
                                                              slot->batch_idx, " (", describe_samples(slot->indices),
                                                              "): "));
    }
    lock.lock();
    slot->batch = std::move(batch);
    slot->error = error;
    slot->done = true;
    done_cv_.notify_all();
  }
}

}  // namespace lt
