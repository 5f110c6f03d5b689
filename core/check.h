#pragma once
// Error types and check macros for lightning-cpp.
//   LT_CHECK / LT_CHECK_VALUE: what a user can cause (bad options, data, a
//     peer's failure). Messages carry their context (key path, rank, step,
//     valid values) in one line, like TORCH_CHECK, but without a C++
//     backtrace: they are meant for users of a trainer.
//   LT_INTERNAL_ASSERT: an invariant of lightning-cpp itself; failing it is
//     our bug, and the message names the condition and the source location.

#include <cstdint>
#include <stdexcept>
#include <string>

#include <c10/util/StringUtil.h>

namespace lt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input (options, config, data): the CLI maps it to exit code 2.
class ValueError : public Error {
 public:
  using Error::Error;
};

// An exception's message for a user: a c10::Error's without its C++
// backtrace, trailing whitespace trimmed.
std::string error_message(const std::exception& e);

// The plural of an English noun, for messages: "rank" -> "ranks",
// "process" -> "processes", "strategy" -> "strategies".
std::string plural(const std::string& noun);
// `n` and `noun`, the noun plural unless n is 1: count_of(1, "rank") is
// "1 rank", count_of(2, "worker process") "2 worker processes".
std::string count_of(int64_t n, const std::string& noun);

}  // namespace lt

#define LT_CHECK(cond, ...)                               \
  do {                                                    \
    if (!(cond)) {                                        \
      throw ::lt::Error(::c10::str(__VA_ARGS__));         \
    }                                                     \
  } while (0)

#define LT_CHECK_VALUE(cond, ...)                         \
  do {                                                    \
    if (!(cond)) {                                        \
      throw ::lt::ValueError(::c10::str(__VA_ARGS__));    \
    }                                                     \
  } while (0)

#define LT_INTERNAL_ASSERT(cond, ...)                                                                 \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      throw ::lt::Error(::c10::str("lightning-cpp internal error: '", #cond, "' failed at ", __FILE__, \
                                   ":", __LINE__, ": ", __VA_ARGS__, " (please report this)"));       \
    }                                                                                                 \
  } while (0)
