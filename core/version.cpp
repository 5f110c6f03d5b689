#include <lightning_cpp/core/version.h>

#ifndef LT_VERSION
#error "LT_VERSION comes from CMakeLists.txt's project(VERSION)"
#endif

namespace lt {

const char* version() { return LT_VERSION; }

}  // namespace lt
