#pragma once
// Which BLAS LibTorch calls. Debian's LibTorch calls BLAS through
// libblas.so.3, which a fresh Debian 12 points at the reference BLAS: every
// matrix product then runs many times slower than with OpenBLAS, and a
// framework's own costs hide behind it (docs/benchmarks.md, "Which BLAS"). scripts/install-deps.sh installs
// libopenblas0-openmp (chosen by bench/blas/compare_blas.sh).

#include <string>

#include <lightning_cpp/core/cpu.h>

namespace lt {

struct BlasInfo {
  // The file sgemm_ is loaded from (links resolved); empty when no process-
  // wide sgemm_ exists (a LibTorch with MKL or its own BLAS built in).
  std::string library;
  // OpenBLAS's build description (openblas_get_config), when it is OpenBLAS.
  std::string openblas_config;
  // The kernels OpenBLAS chose for this CPU (openblas_get_corename:
  // "Haswell", "SkylakeX", "Zen", "Prescott", ...), when it is OpenBLAS.
  std::string openblas_core;
  // Debian's reference BLAS (netlib's Fortran, in .../blas/libblas.so.3).
  bool reference = false;
};

BlasInfo blas_info();

// The OPENBLAS_CORETYPE that would give this CPU OpenBLAS's best kernels
// where OpenBLAS chose older ones ("SkylakeX" or "Haswell"), else empty.
// OpenBLAS 0.3.21 (Debian 12) picks its kernels by the CPU's model number: it
// falls back to Prescott's (SSE3) for a model it does not know, as a cloud
// VM's generic "Intel Xeon Processor", and gives AMD's AVX-512 CPUs its AVX2
// kernels, as later OpenBLAS releases no longer do (the figures, with and
// without OPENBLAS_CORETYPE: docs/benchmarks.md, "Which BLAS").
std::string openblas_coretype_advice(const BlasInfo& blas, const CpuInfo& cpu);

// Warns once per process, on rank 0, when blas_info() is the reference BLAS
// or OpenBLAS runs kernels older than the CPU (openblas_coretype_advice).
void warn_if_slow_blas();

}  // namespace lt
