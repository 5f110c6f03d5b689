#include <lightning_cpp/core/blas.h>

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include <lightning_cpp/core/rank_zero.h>

namespace lt {

BlasInfo blas_info() {
  BlasInfo info;
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (sgemm == nullptr || dladdr(sgemm, &where) == 0 || where.dli_fname == nullptr) return info;
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(where.dli_fname, ec);
  info.library = ec ? std::string(where.dli_fname) : real.string();
  // Asked of sgemm_'s own library: LAPACK may come from another one.
  if (void* handle = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
    using GetConfig = const char* (*)();
    if (auto get_config = reinterpret_cast<GetConfig>(dlsym(handle, "openblas_get_config"))) {
      info.openblas_config = get_config();
    }
    dlclose(handle);
  }
  // Debian installs the reference BLAS as .../blas/libblas.so.3.* (package
  // libblas3); OpenBLAS, BLIS and ATLAS each have a folder of their own.
  const std::filesystem::path file(info.library);
  info.reference = info.openblas_config.empty() && file.parent_path().filename() == "blas" &&
                   file.filename().string().rfind("libblas.so", 0) == 0;
  return info;
}

void warn_if_reference_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    const BlasInfo info = blas_info();
    if (!info.reference) return;
    rank_zero_warn("LibTorch calls the reference BLAS (", info.library, "): matrix products run about 15x slower ",
                   "than with an optimized one. Install OpenBLAS (as root: apt-get install libopenblas0-openmp, or "
                   "scripts/install-deps.sh); LibTorch picks it up through libblas.so.3 with no rebuild");
  });
}

}  // namespace lt
