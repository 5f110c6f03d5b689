#pragma once
// lt::LambdaCallback: a callback from plain functions (Lightning's
// LambdaCallback), for one-off hooks in C++ code:
//
//   auto cb = std::make_shared<lt::LambdaCallback>();
//   cb->on_train_epoch_end_fn = [](lt::Trainer& t, lt::LightningModule&) { ... };
//
// Not in the registry: a YAML file cannot carry C++ functions.

#include <functional>
#include <string>

#include "callbacks/callback.h"

namespace lt {

class LambdaCallback : public Callback {
 public:
  using Hook = std::function<void(Trainer&, LightningModule&)>;
  using StageHook = std::function<void(Trainer&, LightningModule&, Stage)>;
  using BatchHook = std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)>;
  using TrainBatchEndHook = std::function<void(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t)>;
  using CheckpointHook = std::function<void(Trainer&, LightningModule&, StateDict&)>;
  using ExceptionHook = std::function<void(Trainer&, LightningModule&, const std::exception&)>;

  explicit LambdaCallback(std::string name = "LambdaCallback", int priority = 0)
      : name_(std::move(name)), priority_(priority) {}
  std::string name() const override { return name_; }
  int priority() const override { return priority_; }

  StageHook setup_fn, teardown_fn;
  Hook on_fit_start_fn, on_fit_end_fn, on_train_start_fn, on_train_end_fn;
  Hook on_train_epoch_start_fn, on_train_epoch_end_fn;
  Hook on_validation_start_fn, on_validation_end_fn, on_validation_epoch_start_fn, on_validation_epoch_end_fn;
  Hook on_test_start_fn, on_test_end_fn, on_test_epoch_start_fn, on_test_epoch_end_fn;
  Hook on_predict_start_fn, on_predict_end_fn, on_after_backward_fn;
  BatchHook on_train_batch_start_fn, on_validation_batch_end_fn, on_test_batch_end_fn;
  TrainBatchEndHook on_train_batch_end_fn;
  CheckpointHook on_save_checkpoint_fn;
  ExceptionHook on_exception_fn;

  void setup(Trainer& t, LightningModule& m, Stage s) override { call(setup_fn, t, m, s); }
  void teardown(Trainer& t, LightningModule& m, Stage s) override { call(teardown_fn, t, m, s); }
  void on_fit_start(Trainer& t, LightningModule& m) override { call(on_fit_start_fn, t, m); }
  void on_fit_end(Trainer& t, LightningModule& m) override { call(on_fit_end_fn, t, m); }
  void on_train_start(Trainer& t, LightningModule& m) override { call(on_train_start_fn, t, m); }
  void on_train_end(Trainer& t, LightningModule& m) override { call(on_train_end_fn, t, m); }
  void on_train_epoch_start(Trainer& t, LightningModule& m) override { call(on_train_epoch_start_fn, t, m); }
  void on_train_epoch_end(Trainer& t, LightningModule& m) override { call(on_train_epoch_end_fn, t, m); }
  void on_train_batch_start(Trainer& t, LightningModule& m, const Batch& b, int64_t i) override {
    call(on_train_batch_start_fn, t, m, b, i);
  }
  void on_train_batch_end(Trainer& t, LightningModule& m, const torch::Tensor& loss, const Batch& b,
                          int64_t i) override {
    call(on_train_batch_end_fn, t, m, loss, b, i);
  }
  void on_validation_start(Trainer& t, LightningModule& m) override { call(on_validation_start_fn, t, m); }
  void on_validation_end(Trainer& t, LightningModule& m) override { call(on_validation_end_fn, t, m); }
  void on_validation_epoch_start(Trainer& t, LightningModule& m) override { call(on_validation_epoch_start_fn, t, m); }
  void on_validation_epoch_end(Trainer& t, LightningModule& m) override { call(on_validation_epoch_end_fn, t, m); }
  void on_validation_batch_end(Trainer& t, LightningModule& m, const Batch& b, int64_t i) override {
    call(on_validation_batch_end_fn, t, m, b, i);
  }
  void on_test_start(Trainer& t, LightningModule& m) override { call(on_test_start_fn, t, m); }
  void on_test_end(Trainer& t, LightningModule& m) override { call(on_test_end_fn, t, m); }
  void on_test_epoch_start(Trainer& t, LightningModule& m) override { call(on_test_epoch_start_fn, t, m); }
  void on_test_epoch_end(Trainer& t, LightningModule& m) override { call(on_test_epoch_end_fn, t, m); }
  void on_test_batch_end(Trainer& t, LightningModule& m, const Batch& b, int64_t i) override {
    call(on_test_batch_end_fn, t, m, b, i);
  }
  void on_predict_start(Trainer& t, LightningModule& m) override { call(on_predict_start_fn, t, m); }
  void on_predict_end(Trainer& t, LightningModule& m) override { call(on_predict_end_fn, t, m); }
  void on_after_backward(Trainer& t, LightningModule& m) override { call(on_after_backward_fn, t, m); }
  void on_save_checkpoint(Trainer& t, LightningModule& m, StateDict& c) override { call(on_save_checkpoint_fn, t, m, c); }
  void on_exception(Trainer& t, LightningModule& m, const std::exception& e) override { call(on_exception_fn, t, m, e); }

 private:
  template <typename Fn, typename... Args>
  static void call(const Fn& fn, Args&&... args) {
    if (fn) fn(std::forward<Args>(args)...);
  }
  std::string name_;
  int priority_;
};

}  // namespace lt
