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

#include <lightning_cpp/core/callback.h>

namespace lt {

class LambdaCallback : public Callback {
 public:
  explicit LambdaCallback(std::string name = "LambdaCallback", int priority = 0)
      : name_(std::move(name)), priority_(priority) {}
  std::string name() const override { return name_; }
  int priority() const override { return priority_; }

  // One function per hook of core/callback.h, named <hook>_fn; unset ones do nothing.
#define LT_LAMBDA_HOOK(name, params, args) \
  std::function<void params> name##_fn;    \
  void name params override {              \
    if (name##_fn) name##_fn args;         \
  }
  LT_CALLBACK_HOOKS(LT_LAMBDA_HOOK)
#undef LT_LAMBDA_HOOK

 private:
  std::string name_;
  int priority_;
};

}  // namespace lt
