#include <lightning_cpp/core/check.h>

#include <c10/util/Exception.h>

namespace lt {

std::string error_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

std::string count_of(int64_t n, const std::string& noun) {
  const bool es = !noun.empty() && noun.back() == 's';  // "process": "processes"
  return std::to_string(n) + " " + noun + (n == 1 ? "" : es ? "es" : "s");
}

}  // namespace lt
