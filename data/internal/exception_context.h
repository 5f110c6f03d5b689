#pragma once
// Internal to the data loader (data/*.cpp): an exception a worker thread
// caught, to be rethrown on the loop's thread with where it happened (epoch,
// batch, samples) in front of its message.

#include <exception>
#include <string>

namespace lt::detail {

// The same exception type where we know how to rebuild it (lt's, c10's, the
// standard ones users throw), its message prefixed with `context`; any other
// as a std::runtime_error.
std::exception_ptr with_context(std::exception_ptr error, const std::string& context);

}  // namespace lt::detail
