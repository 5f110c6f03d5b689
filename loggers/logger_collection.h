#pragma once
// lt::LoggerCollection: several loggers as one (Lightning's list of
// loggers, `Trainer(logger=[CSVLogger(...), TensorBoardLogger(...)])`):
// every call goes to each in order. Its log_dir is the first one's, as
// Lightning's trainer.log_dir; asking for it fixes every member's version at
// once, so that loggers choosing "the next free version" of one folder agree
// (nothing is written before that). YAML: `logger: [CSVLogger, TensorBoardLogger]`.

#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/core/logger.h>

namespace lt {

class LoggerCollection : public Logger {
 public:
  // At least one logger, none null.
  explicit LoggerCollection(std::vector<std::shared_ptr<Logger>> loggers);

  // The members' names joined by "_" (Lightning's).
  std::string name() const override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const HParams& params) override;
  void save() override;
  void finalize(const std::string& status) override;
  std::string log_dir() const override;
  void continue_previous() override;
  void continue_version_of(const std::string& checkpoint) override;
  // {"0": the first member's state, "1": the second's, ...}
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }

 private:
  std::vector<std::shared_ptr<Logger>> loggers_;
};

// The logger of type T that `logger` is or holds (a collection's first such
// member); null if none. A text for TensorBoard, from a callback on rank 0:
//   if (auto* tb = lt::find_logger<lt::TensorBoardLogger>(trainer.logger())) tb->add_text("sample", s, step);
template <typename T>
T* find_logger(Logger* logger) {
  if (auto* found = dynamic_cast<T*>(logger)) return found;
  if (auto* collection = dynamic_cast<LoggerCollection*>(logger)) {
    for (const auto& member : collection->loggers()) {
      if (T* found = find_logger<T>(member.get())) return found;
    }
  }
  return nullptr;
}

}  // namespace lt
