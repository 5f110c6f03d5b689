#include <lightning_cpp/core/types.h>

#include <algorithm>
#include <cmath>

namespace lt {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kNone: return "none";
    case Stage::kSanityCheck: return "sanity_check";
    case Stage::kTrain: return "train";
    case Stage::kValidate: return "validate";
    case Stage::kTest: return "test";
    case Stage::kPredict: return "predict";
  }
  return "unknown";
}

int64_t FractionOrCount::apply(int64_t total) const {
  if (is_count_) return std::min(total, count_);
  return static_cast<int64_t>(std::floor(static_cast<double>(total) * fraction_));
}

std::string FractionOrCount::str() const {
  return is_count_ ? std::to_string(count_) : std::to_string(fraction_);
}

}  // namespace lt
