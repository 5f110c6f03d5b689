#pragma once
// Small value types shared by the trainer, loops, strategies and callbacks.

#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <lightning_cpp/core/batch.h>

namespace lt {

// What a piece of the run writes into a checkpoint; picklable as is: a dict
// of string keys to IValues (tensors, numbers, strings, nested StateDicts).
using StateDict = c10::impl::GenericDict;
inline StateDict new_state_dict() { return StateDict(c10::StringType::get(), c10::AnyType::get()); }

// Hyperparameters recorded in checkpoints and hparams.yaml.
using HParams = std::map<std::string, std::string>;

enum class Stage { kNone, kSanityCheck, kTrain, kValidate, kTest, kPredict };
const char* stage_name(Stage stage);

enum class ReduceOp { kSum, kMean, kMin, kMax };

// Lightning's `int | float` knobs (limit_*_batches, val_check_interval): an
// integer is a count of batches, a floating value a fraction of the epoch.
// Implicit on purpose, so `.limit_train_batches(10)` and `(0.25)` read as in Python.
class FractionOrCount {
 public:
  FractionOrCount(int count) : count_(count), is_count_(true) {}          // NOLINT
  FractionOrCount(int64_t count) : count_(count), is_count_(true) {}      // NOLINT
  FractionOrCount(double fraction) : fraction_(fraction), is_count_(false) {}  // NOLINT
  bool is_count() const { return is_count_; }
  int64_t count() const { return count_; }
  double fraction() const { return fraction_; }
  // Applies the limit to an epoch of `total` batches.
  int64_t apply(int64_t total) const;
  std::string str() const;

 private:
  int64_t count_ = 0;
  double fraction_ = 1.0;
  bool is_count_ = false;
};

}  // namespace lt
