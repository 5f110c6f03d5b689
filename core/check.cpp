#include <lightning_cpp/core/check.h>

#include <c10/util/Exception.h>

namespace lt {

std::string error_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

std::string plural(const std::string& noun) {
  if (noun.empty()) return noun;
  if (noun.back() == 's') return noun + "es";
  if (noun.back() == 'y') return noun.substr(0, noun.size() - 1) + "ies";
  return noun + "s";
}

std::string count_of(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + (n == 1 ? noun : plural(noun));
}

}  // namespace lt
