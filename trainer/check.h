#pragma once
// Error type and check macro for lightning-cpp. Messages carry their context
// (key path, rank, step, valid values) in one line, like TORCH_CHECK, but
// without a C++ backtrace: they are meant for users of a trainer.

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
