#include <lightning_cpp/core/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <lightning_cpp/core/check.h>

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

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The fewest significant digits that read back exactly, as d.ddde[+-]X.
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  const std::string text = buf;
  const size_t e = text.find('e');
  const bool negative = text[0] == '-';
  std::string mantissa = text.substr(negative ? 1 : 0, e - (negative ? 1 : 0));
  const int exponent = std::atoi(text.c_str() + e + 1);
  mantissa.erase(std::remove(mantissa.begin(), mantissa.end(), '.'), mantissa.end());
  std::string out = negative ? "-" : "";
  // Python switches to exponent notation below 1e-4 and from 1e16 on.
  if (exponent < -4 || exponent >= 16) {
    out += mantissa.substr(0, 1);
    if (mantissa.size() > 1) out += "." + mantissa.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + mantissa;
  const auto point = static_cast<size_t>(exponent) + 1;
  if (mantissa.size() <= point) return out + mantissa + std::string(point - mantissa.size(), '0') + ".0";
  return out + mantissa.substr(0, point) + "." + mantissa.substr(point);
}

std::string HParam::str() const {
  if (const auto* b = std::get_if<bool>(&value_)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&value_)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value_)) return float_repr(*d);
  return std::get<std::string>(value_);
}

std::ostream& operator<<(std::ostream& out, const HParam& hparam) {
  return out << (hparam.is_string() ? "'" + hparam.str() + "'" : hparam.str());
}

std::string FractionOrCount::str() const {
  return is_count_ ? std::to_string(count_) : std::to_string(fraction_);
}

double Metrics::at(const std::string& name) const {
  const auto it = find(name);
  if (it != end()) return it->second;
  std::string names;
  for (const auto& entry : *this) names += (names.empty() ? "" : ", ") + entry.first;
  throw ValueError(c10::str("no metric '", name, "' was logged; the metrics are: ",
                            names.empty() ? std::string("none (nothing logged with on_epoch)") : names));
}

}  // namespace lt
