# What the DDP strategy (plugins/distributed, plugins/strategies/ddp)
# needs from the LibTorch it is built against. Included once, after the
# lightning_cpp target is defined.

# c10d/reducer.hpp includes torch/csrc/distributed/autograd/context/context.h,
# which some LibTorch packages (Debian's libtorch-dev 1.13) do not ship. Our
# stand-in declares the two names reducer.hpp uses (see its comment). It goes
# on the include path ahead of the system headers only when the real header
# is absent, and only for the library's own sources: no installed header
# includes reducer.hpp.
set(_lt_real_context_h "")
foreach(_dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS "${_dir}/torch/csrc/distributed/autograd/context/context.h")
    set(_lt_real_context_h "${_dir}/torch/csrc/distributed/autograd/context/context.h")
  endif()
endforeach()
if(NOT _lt_real_context_h)
  message(STATUS "lightning-cpp: LibTorch lacks distributed/autograd/context/context.h; "
                 "using plugins/strategies/ddp/c10d_compat for c10d/reducer.hpp")
  target_include_directories(lightning_cpp BEFORE PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/strategies/ddp/c10d_compat)
endif()

# NCCL: only when LibTorch was built with CUDA and the NCCL headers are here.
# Without it, asking for the nccl backend is an lt::Error at run time.
set(LT_WITH_NCCL OFF)
# The headers must be those of the libnccl LibTorch loads: another nccl.h
# changes the layout of ProcessGroupNCCL::Options. A wheel's torch loads the
# nvidia-nccl package beside it, so its headers are looked for first.
if(LT_TORCH_CUDA)
  find_path(LT_NCCL_INCLUDE_DIR nccl.h HINTS "${LT_TORCH_PREFIX}/../nvidia/nccl/include" ENV NCCL_ROOT
            PATH_SUFFIXES include)
  if(LT_NCCL_INCLUDE_DIR)
    set(LT_WITH_NCCL ON)
  endif()
endif()
message(STATUS "lightning-cpp: NCCL backend ${LT_WITH_NCCL} ${LT_NCCL_INCLUDE_DIR}")
if(LT_WITH_NCCL)
  # Only the strategy's sources see it, so the shared torch PCH stays valid.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/plugins/distributed/process_group.cpp
    PROPERTIES COMPILE_DEFINITIONS "LT_WITH_NCCL=1;USE_C10D_NCCL")
  target_include_directories(lightning_cpp PRIVATE ${LT_NCCL_INCLUDE_DIR})
endif()
