#include <lightning_cpp/loggers/logger_collection.h>

#include <lightning_cpp/core/check.h>

namespace lt {

LoggerCollection::LoggerCollection(std::vector<std::shared_ptr<Logger>> loggers) : loggers_(std::move(loggers)) {
  LT_CHECK_VALUE(!loggers_.empty(), "LoggerCollection: no loggers (use no logger instead)");
  for (size_t i = 0; i < loggers_.size(); ++i) {
    LT_CHECK_VALUE(loggers_[i] != nullptr, "LoggerCollection: logger ", i, " is null");
  }
}

std::string LoggerCollection::name() const {
  std::string out;
  for (const auto& logger : loggers_) out += (out.empty() ? "" : "_") + logger->name();
  return out;
}

void LoggerCollection::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  (void)log_dir();  // every member's version fixed before the first writes
  for (const auto& logger : loggers_) logger->log_metrics(metrics, step);
}

void LoggerCollection::log_hyperparams(const HParams& params) {
  (void)log_dir();  // every member's version fixed before the first writes
  for (const auto& logger : loggers_) logger->log_hyperparams(params);
}

void LoggerCollection::save() {
  (void)log_dir();  // every member's version fixed before the first writes
  for (const auto& logger : loggers_) logger->save();
}

void LoggerCollection::finalize(const std::string& status) {
  (void)log_dir();  // every member's version fixed before the first writes
  for (const auto& logger : loggers_) logger->finalize(status);
}

std::string LoggerCollection::log_dir() const {
  for (size_t i = 1; i < loggers_.size(); ++i) (void)loggers_[i]->log_dir();
  return loggers_.front()->log_dir();
}

void LoggerCollection::continue_previous() {
  for (const auto& logger : loggers_) logger->continue_previous();
}

void LoggerCollection::continue_version_of(const std::string& checkpoint) {
  for (const auto& logger : loggers_) logger->continue_version_of(checkpoint);
}

StateDict LoggerCollection::state_dict() const {
  StateDict state = new_state_dict();
  for (size_t i = 0; i < loggers_.size(); ++i) state.insert(std::to_string(i), loggers_[i]->state_dict());
  return state;
}

void LoggerCollection::load_state_dict(const StateDict& state) {
  for (size_t i = 0; i < loggers_.size(); ++i) {
    const std::string key = std::to_string(i);
    if (state.contains(key) && state.at(key).isGenericDict()) {
      loggers_[i]->load_state_dict(state.at(key).toGenericDict());
    }
  }
}

}  // namespace lt
