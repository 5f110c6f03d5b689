#include <lightning_cpp/core/blas.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
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
    if (auto get_core = reinterpret_cast<GetConfig>(dlsym(handle, "openblas_get_corename"))) {
      info.openblas_core = get_core();
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

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool one_of(const std::string& core, std::initializer_list<const char*> cores) {
  return std::any_of(cores.begin(), cores.end(), [&](const char* c) { return core == c; });
}

// OpenBLAS's kernels (its dynamic.c corenames) for AVX-512, and for AVX2.
constexpr std::initializer_list<const char*> kAvx512Cores = {"skylakex", "cooperlake", "sapphirerapids"};
constexpr std::initializer_list<const char*> kAvx2Cores = {"haswell", "zen"};

}  // namespace

std::string openblas_coretype_advice(const BlasInfo& blas, const CpuInfo& cpu) {
  if (blas.openblas_core.empty() || !cpu.has("avx2") || !cpu.has("fma")) return "";
  const std::string core = lower(blas.openblas_core);
  if (one_of(core, kAvx512Cores)) return "";
  // What OpenBLAS asks of a CPU for its SkylakeX kernels.
  const bool avx512 = cpu.has("avx512f") && cpu.has("avx512bw") && cpu.has("avx512vl") && cpu.has("avx512dq");
  if (avx512) return "SkylakeX";
  return one_of(core, kAvx2Cores) ? "" : "Haswell";
}

void warn_if_slow_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    const BlasInfo info = blas_info();
    if (info.reference) {
      rank_zero_warn("LibTorch calls the reference BLAS (", info.library, "): matrix products run about 15x slower ",
                     "than with an optimized one. Install OpenBLAS (as root: apt-get install libopenblas0-openmp, or "
                     "scripts/install-deps.sh); LibTorch picks it up through libblas.so.3 with no rebuild");
      return;
    }
    const std::string coretype = openblas_coretype_advice(info, cpu_info());
    if (coretype.empty()) return;
    const bool avx2_kernels = one_of(lower(info.openblas_core), kAvx2Cores);
    rank_zero_warn("OpenBLAS does not know this CPU (", cpu_info().model, ") and runs its ", info.openblas_core,
                   " kernels, without ", avx2_kernels ? "AVX-512" : "AVX2",
                   ": matrix products run slower than they can (sgemm ",
                   avx2_kernels ? "1.9x as fast with SkylakeX's on an AMD EPYC with AVX-512"
                                : "5x as fast with SkylakeX's on a cloud VM's 'Intel Xeon Processor'",
                   "). Start the program with OPENBLAS_CORETYPE=", coretype, " in its environment (export ",
                   "OPENBLAS_CORETYPE=", coretype, "); OpenBLAS reads it when it loads");
  });
}

}  // namespace lt
