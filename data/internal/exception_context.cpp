#include <lightning_cpp/data/internal/exception_context.h>

#include <stdexcept>

#include <c10/util/Exception.h>

#include <lightning_cpp/core/check.h>

namespace lt::detail {

namespace {

template <typename E>
std::exception_ptr c10_with_context(const E& e, const std::string& context) {
  return std::make_exception_ptr(E(context + e.what_without_backtrace(), e.backtrace(), e.caller()));
}

}  // namespace

std::exception_ptr with_context(std::exception_ptr error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const ValueError& e) {
    return std::make_exception_ptr(ValueError(context + e.what()));
  } catch (const Error& e) {
    return std::make_exception_ptr(Error(context + e.what()));
  } catch (const c10::IndexError& e) {
    return c10_with_context(e, context);
  } catch (const c10::ValueError& e) {
    return c10_with_context(e, context);
  } catch (const c10::TypeError& e) {
    return c10_with_context(e, context);
  } catch (const c10::NotImplementedError& e) {
    return c10_with_context(e, context);
  } catch (const c10::Error& e) {
    return c10_with_context(e, context);
  } catch (const std::invalid_argument& e) {
    return std::make_exception_ptr(std::invalid_argument(context + e.what()));
  } catch (const std::out_of_range& e) {
    return std::make_exception_ptr(std::out_of_range(context + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(context + e.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(context + "an exception that is not a std::exception"));
  }
}

}  // namespace lt::detail
