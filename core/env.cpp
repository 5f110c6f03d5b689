#include <lightning_cpp/core/env.h>

#include <cstdlib>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> get_int(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  size_t used = 0;
  int64_t out = 0;
  try {
    out = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LT_CHECK(used == v->size(), "environment variable ", name, "='", *v, "' is not an integer");
  return out;
}

int64_t require_int(const char* name, const char* environment) {
  auto v = get_int(name);
  LT_CHECK(v.has_value(), environment, ": environment variable ", name, " is not set");
  return *v;
}

}  // namespace env

}  // namespace lt
