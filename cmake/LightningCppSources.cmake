# The library's sources: every .cpp under the library's areas, except
# programs (main.cpp) and tests (*_test.cpp). A glob, so that work on
# different areas never edits the same list.
file(GLOB_RECURSE LT_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/core/*.cpp
  ${PROJECT_SOURCE_DIR}/trainer/*.cpp
  ${PROJECT_SOURCE_DIR}/fabric/*.cpp
  ${PROJECT_SOURCE_DIR}/loops/*.cpp
  ${PROJECT_SOURCE_DIR}/plugins/*.cpp
  ${PROJECT_SOURCE_DIR}/callbacks/*.cpp
  ${PROJECT_SOURCE_DIR}/tuner/*.cpp
  ${PROJECT_SOURCE_DIR}/loggers/*.cpp
  ${PROJECT_SOURCE_DIR}/data/*.cpp
  ${PROJECT_SOURCE_DIR}/cli/*.cpp)
list(FILTER LT_SOURCES EXCLUDE REGEX "/(main|[a-z_]*_test)\\.cpp$")
