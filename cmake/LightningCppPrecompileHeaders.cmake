# lightning_cpp_precompile_headers(<target>): gives <target> a precompiled header of <torch/torch.h> and
# lightning-cpp's public headers, built once per build tree and shared by every target that asks for it
# (target_precompile_headers(REUSE_FROM) an internal object library made on first use). Parsing
# <torch/torch.h> is much of what a one-file change costs to rebuild; with this it is parsed once (GCC
# still instantiates the templates each file uses: docs/benchmarks.md#rebuilds has the figures).
#
#   find_package(LightningCpp REQUIRED)
#   add_executable(my_app main.cpp)
#   target_link_libraries(my_app PRIVATE LightningCpp::lightning_cpp)
#   lightning_cpp_precompile_headers(my_app)
#
# GCC uses a precompiled header only where the compiler flags that shape code match the ones it was built
# with: position-independent code (-fPIC for libraries, -fPIE for executables that ask for it, neither
# by default), the C++ standard and extensions. One internal target is made per such flavour
# (lightning_cpp_pch, lightning_cpp_pch_pic, ...), each built once. Definitions or options a target adds
# for itself must not change what the headers mean; where the compiler cannot use the header it says so
# (-Winvalid-pch, added to the target) and reads the headers in full, so the build stays correct.
include_guard(GLOBAL)

set(LIGHTNING_CPP_PCH_HEADERS
  <torch/torch.h>
  <lightning_cpp/lightning.h>
  CACHE STRING "Headers lightning_cpp_precompile_headers() precompiles")

function(lightning_cpp_precompile_headers target)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "lightning_cpp_precompile_headers: no target named '${target}'")
  endif()
  get_target_property(type ${target} TYPE)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  set(suffix "")
  if(type STREQUAL "SHARED_LIBRARY" OR type STREQUAL "MODULE_LIBRARY")
    set(suffix "_pic")
  elseif(pic)
    if(type STREQUAL "EXECUTABLE")
      set(suffix "_pie")
    else()
      set(suffix "_pic")
    endif()
  elseif(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$")
    message(FATAL_ERROR "lightning_cpp_precompile_headers: '${target}' is a ${type}; "
      "expected an executable or a static, shared, module or object library")
  endif()
  get_target_property(standard ${target} CXX_STANDARD)
  get_target_property(extensions ${target} CXX_EXTENSIONS)
  if(standard)
    string(APPEND suffix "_cxx${standard}")
  endif()
  if(NOT extensions STREQUAL "extensions-NOTFOUND" AND NOT extensions STREQUAL "")
    if(extensions)
      string(APPEND suffix "_gnu")
    else()
      string(APPEND suffix "_iso")
    endif()
  endif()
  set(pch lightning_cpp_pch${suffix})
  if(NOT TARGET ${pch})
    set(source ${CMAKE_BINARY_DIR}/lightning_cpp_pch/${pch}.cpp)
    if(NOT EXISTS ${source})
      file(WRITE ${source} "// The translation unit CMake builds ${pch}'s precompiled header with.\n")
    endif()
    add_library(${pch} OBJECT ${source})
    target_link_libraries(${pch} PRIVATE LightningCpp::lightning_cpp)
    target_precompile_headers(${pch} PRIVATE ${LIGHTNING_CPP_PCH_HEADERS})
    set_target_properties(${pch} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    if(suffix MATCHES "^_pic")
      set_target_properties(${pch} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    elseif(suffix MATCHES "^_pie")
      target_compile_options(${pch} PRIVATE -fPIE)
    endif()
    if(standard)
      set_target_properties(${pch} PROPERTIES CXX_STANDARD ${standard})
    endif()
    if(NOT extensions STREQUAL "extensions-NOTFOUND" AND NOT extensions STREQUAL "")
      set_target_properties(${pch} PROPERTIES CXX_EXTENSIONS ${extensions})
    endif()
  endif()
  target_precompile_headers(${target} REUSE_FROM ${pch})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Winvalid-pch)
  endif()
endfunction()
