# Which LibTorch lightning-cpp builds against, found where users have it, in
# this order:
#   1. one given: -DTorch_DIR=<libtorch>/share/cmake/Torch, or a
#      CMAKE_PREFIX_PATH (variable or environment) holding a LibTorch, such as
#      an unpacked libtorch archive or python -c 'import torch;
#      print(torch.utils.cmake_prefix_path)';
#   2. the torch of the virtual environment LT_TORCH_VENV (scripts/install-deps.sh
#      makes it, /opt/torch/.venv: PyTorch 2.11 from PyPI, its LibTorch included);
#   3. Debian's libtorch-dev (1.13, CPU only).
# It prints which one, its version and whether it is a CUDA build, and sets
#   LT_TORCH_SOURCE   given | venv | debian
#   LT_TORCH_PREFIX   the LibTorch's root (include/, lib/)
#   LT_TORCH_CUDA     ON for a CUDA build
#   LT_PYTHON         the Python whose torch is this LibTorch (tests' oracles, benches)
#   LT_TORCHRUN       that Python's torchrun (launch tests)
#
# Why the prefix goes ahead of everything: TorchConfig.cmake finds libtorch.so
# with find_library(... PATHS <prefix>/lib), which searches the system's
# folders first, so with Debian's libtorch-dev installed any other LibTorch
# would link Debian's libtorch.so 1.13 beside its own libtorch_cpu.so.

set(LT_TORCH_VENV /opt/torch/.venv CACHE PATH "Virtual environment whose torch is used when none is given")
set(_lt_debian_torch /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/Torch)

set(_lt_torch_config "")
if(Torch_DIR AND Torch_DIR STREQUAL LT_TORCH_FOUND_DIR)  # found so by an earlier configure
  set(LT_TORCH_SOURCE ${LT_TORCH_FOUND_SOURCE})
  set(_lt_torch_config "${Torch_DIR}")
elseif(Torch_DIR AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
  set(LT_TORCH_SOURCE given)
  set(_lt_torch_config "${Torch_DIR}")
else()
  # The CMAKE_PREFIX_PATH a user gave (variable or environment), nothing else.
  find_path(_lt_torch_given TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch lib/cmake/Torch Torch
            NO_CACHE NO_CMAKE_ENVIRONMENT_PATH NO_SYSTEM_ENVIRONMENT_PATH NO_CMAKE_SYSTEM_PATH
            NO_CMAKE_INSTALL_PREFIX)
  if(NOT _lt_torch_given)
    find_path(_lt_torch_given TorchConfig.cmake PATHS ENV CMAKE_PREFIX_PATH
              PATH_SUFFIXES share/cmake/Torch lib/cmake/Torch Torch NO_CACHE NO_DEFAULT_PATH)
  endif()
  file(GLOB _lt_torch_venv "${LT_TORCH_VENV}/lib/python3*/site-packages/torch/share/cmake/Torch/TorchConfig.cmake")
  if(_lt_torch_given)
    set(LT_TORCH_SOURCE given)
    set(_lt_torch_config "${_lt_torch_given}")
  elseif(_lt_torch_venv)
    set(LT_TORCH_SOURCE venv)
    list(GET _lt_torch_venv 0 _lt_torch_venv)
    get_filename_component(_lt_torch_config "${_lt_torch_venv}" DIRECTORY)
  elseif(EXISTS ${_lt_debian_torch}/TorchConfig.cmake)
    set(_lt_torch_config ${_lt_debian_torch})
  else()
    message(FATAL_ERROR "lightning-cpp: no LibTorch found. Give one with -DTorch_DIR=<libtorch>/share/cmake/Torch "
            "or -DCMAKE_PREFIX_PATH=<libtorch>, or run scripts/install-deps.sh (PyTorch 2.11 into ${LT_TORCH_VENV}, "
            "and Debian's libtorch-dev)")
  endif()
endif()
get_filename_component(_lt_torch_config "${_lt_torch_config}" REALPATH)
if(_lt_torch_config STREQUAL _lt_debian_torch)
  set(LT_TORCH_SOURCE debian)  # given or found, it is Debian's
endif()
set(Torch_DIR "${_lt_torch_config}" CACHE PATH "The LibTorch lightning-cpp builds against (its TorchConfig.cmake)" FORCE)
set(LT_TORCH_FOUND_DIR "${Torch_DIR}" CACHE INTERNAL "")
set(LT_TORCH_FOUND_SOURCE "${LT_TORCH_SOURCE}" CACHE INTERNAL "")

if(LT_TORCH_SOURCE STREQUAL "debian")
  set(LT_TORCH_PREFIX /usr)
else()
  get_filename_component(LT_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
  list(PREPEND CMAKE_PREFIX_PATH "${LT_TORCH_PREFIX}")
endif()

find_package(Torch REQUIRED CONFIG)

get_filename_component(_lt_torch_lib "${TORCH_LIBRARY}" REALPATH)
get_filename_component(_lt_prefix_real "${LT_TORCH_PREFIX}" REALPATH)
string(FIND "${_lt_torch_lib}" "${_lt_prefix_real}/" _lt_at)
if(NOT _lt_at EQUAL 0)
  message(FATAL_ERROR "lightning-cpp: the LibTorch at ${Torch_DIR} found its libtorch.so at ${TORCH_LIBRARY}, "
          "outside ${LT_TORCH_PREFIX}: two LibTorch versions would be mixed. Clear the build folder's cache.")
endif()

set(LT_TORCH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(LT_TORCH_CUDA ON)
endif()

# A CUDA LibTorch needs a CUDA toolkit of the CUDA version it was built with:
# the wheel says it in version.py, an archive in build-version (2.11.0+cu130).
if(LT_TORCH_CUDA)
  set(_lt_built_cuda "")
  if(EXISTS "${LT_TORCH_PREFIX}/version.py")
    file(STRINGS "${LT_TORCH_PREFIX}/version.py" _lt_line REGEX "^cuda")
    string(REGEX MATCH "[0-9]+\\.[0-9]+" _lt_built_cuda "${_lt_line}")
  elseif(EXISTS "${LT_TORCH_PREFIX}/build-version")
    file(READ "${LT_TORCH_PREFIX}/build-version" _lt_line)
    if(_lt_line MATCHES "\\+cu([0-9]+)([0-9])")
      set(_lt_built_cuda "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lt_toolkit_cuda "${CUDA_VERSION}")
  if(_lt_built_cuda AND _lt_toolkit_cuda AND NOT _lt_built_cuda VERSION_EQUAL _lt_toolkit_cuda)
    message(FATAL_ERROR "lightning-cpp: LibTorch ${Torch_VERSION} at ${LT_TORCH_PREFIX} was built with CUDA "
            "${_lt_built_cuda}, but the CUDA toolkit found is ${CUDA_VERSION} (${CUDA_TOOLKIT_ROOT_DIR}): give one of "
            "CUDA ${_lt_built_cuda} with -DCUDAToolkit_ROOT=<dir> (or nvcc of that version first on PATH)")
  endif()
endif()

# The Python (and torchrun) of this LibTorch: that of the environment a
# wheel's torch sits in, /usr/bin's for Debian's, the venv's for an archive
# (which has none; its version is not checked against the venv's).
if(LT_TORCH_SOURCE STREQUAL "debian")
  set(_lt_python /usr/bin/python3)
  set(_lt_torchrun /usr/bin/torchrun)
else()
  string(FIND "${LT_TORCH_PREFIX}" "/site-packages/torch" _lt_in_site)
  if(_lt_in_site GREATER 0)  # a wheel's torch: the Python of the environment it sits in
    string(REGEX REPLACE "/lib/python3[^/]*/site-packages/torch$" "" _lt_env "${LT_TORCH_PREFIX}")
  else()
    set(_lt_env "${LT_TORCH_VENV}")
  endif()
  set(_lt_python "${_lt_env}/bin/python3")
  set(_lt_torchrun "${_lt_env}/bin/torchrun")
endif()
# A -D of either wins; otherwise they follow the LibTorch (also when a later
# configure switches it).
foreach(_lt_var LT_PYTHON LT_TORCHRUN)
  string(TOLOWER "_${_lt_var}" _lt_auto)
  if(NOT ${_lt_var} OR ${_lt_var} STREQUAL "${${_lt_var}_FOUND}")
    set(${_lt_var} "${${_lt_auto}}" CACHE FILEPATH "The Python or torchrun of this LibTorch (tests)" FORCE)
  endif()
  set(${_lt_var}_FOUND "${${_lt_auto}}" CACHE INTERNAL "")
endforeach()

set(_lt_cuda_text "CPU only")
if(LT_TORCH_CUDA)
  set(_lt_cuda_text "CUDA ${CUDA_VERSION}")
endif()
message(STATUS "lightning-cpp: LibTorch ${Torch_VERSION} (${_lt_cuda_text}), ${LT_TORCH_SOURCE}: ${Torch_DIR}")
message(STATUS "lightning-cpp: tests' Python ${LT_PYTHON}, torchrun ${LT_TORCHRUN}")
