#pragma once
// Small value types shared by the trainer, loops, strategies and callbacks.

#include <cstdint>
#include <map>
#include <utility>
#include <ostream>
#include <string>
#include <type_traits>
#include <variant>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <lightning_cpp/core/batch.h>

namespace lt {

// What a piece of the run writes into a checkpoint; picklable as is: a dict
// of string keys to IValues (tensors, numbers, strings, nested StateDicts).
using StateDict = c10::impl::GenericDict;
inline StateDict new_state_dict() { return StateDict(c10::StringType::get(), c10::AnyType::get()); }

// Python's repr of a float: the shortest text that reads back as the same
// double (1e-07, 0.001, 256.0, 1e+16, inf, nan).
std::string float_repr(double value);

// One hyperparameter with its type, as Lightning's save_hyperparameters keeps
// Python's: a bool, an integer, a floating-point number or a string.
// hparams.yaml, TensorBoard and checkpoints keep the type: hparams()["lr"] = 1e-7
// is the number 1e-07 there (exactly), hparams()["lr"] = "1e-7" the string.
class HParam {
 public:
  using Value = std::variant<bool, int64_t, double, std::string>;
  HParam() : value_(std::string()) {}
  HParam(bool v) : value_(v) {}  // NOLINT: implicit, as the value is written
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  HParam(T v) : value_(static_cast<int64_t>(v)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  HParam(T v) : value_(static_cast<double>(v)) {}  // NOLINT
  HParam(const char* v) : value_(std::string(v)) {}  // NOLINT: a literal is a string, not a bool
  HParam(std::string v) : value_(std::move(v)) {}    // NOLINT

  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_int() const { return std::holds_alternative<int64_t>(value_); }
  bool is_double() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  const Value& value() const { return value_; }
  // true/false, 256, 1e-07 (float_repr), or the string itself.
  std::string str() const;

  bool operator==(const HParam& other) const { return value_ == other.value_; }
  bool operator!=(const HParam& other) const { return !(*this == other); }

 private:
  Value value_;
};
std::ostream& operator<<(std::ostream& out, const HParam& hparam);

// Hyperparameters recorded in checkpoints, hparams.yaml and TensorBoard.
using HParams = std::map<std::string, HParam>;

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

// What Trainer::validate and test return: the logged metrics by name. A
// lookup of a name that was not logged throws lt::ValueError naming the ones
// that were (a std::map's operator[] would insert 0).
class Metrics : public std::map<std::string, double> {
 public:
  Metrics() = default;
  Metrics(std::map<std::string, double> metrics)  // NOLINT: what the loops return
      : std::map<std::string, double>(std::move(metrics)) {}
  double at(const std::string& name) const;
  double operator[](const std::string& name) const { return at(name); }
};

}  // namespace lt
