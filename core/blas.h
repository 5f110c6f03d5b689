#pragma once
// Which BLAS LibTorch calls. Debian's LibTorch calls BLAS through
// libblas.so.3, which a fresh Debian 12 points at the reference BLAS: every
// matrix product then runs ~15x slower than with OpenBLAS, and a
// framework's own costs hide behind it. scripts/install-deps.sh installs
// libopenblas0-openmp (chosen by bench/blas/compare_blas.sh).

#include <string>

namespace lt {

struct BlasInfo {
  // The file sgemm_ is loaded from (links resolved); empty when no process-
  // wide sgemm_ exists (a LibTorch with MKL or its own BLAS built in).
  std::string library;
  // OpenBLAS's build description (openblas_get_config), when it is OpenBLAS.
  std::string openblas_config;
  // Debian's reference BLAS (netlib's Fortran, in .../blas/libblas.so.3).
  bool reference = false;
};

BlasInfo blas_info();

// Warns once per process, on rank 0, when blas_info() is the reference BLAS.
void warn_if_reference_blas();

}  // namespace lt
