// core/blas.h: the BLAS behind LibTorch, as a Trainer sees it: warned about
// once under Debian's reference BLAS and under OpenBLAS on kernels older than
// the CPU (checked in child processes under another libblas.so.3), and the
// OPENBLAS_CORETYPE advice by kernels and CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <lightning_cpp/core/blas.h>
#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/trainer/trainer.h>

namespace {

// -- the BLAS behind LibTorch ------------------------------------------------------

// Run by Blas.* in a child process (LT_BLAS_CHILD=1) under another libblas.so.3.
TEST(BlasChild, ConstructsTrainersAndTellsTheBlas) {
  if (std::getenv("LT_BLAS_CHILD") == nullptr) GTEST_SKIP() << "run by Blas.* in a child process";
  lt::Trainer first;
  lt::Trainer second;
  const lt::BlasInfo info = lt::blas_info();
  std::printf("blas_info: %s reference=%d openblas=%d core=%s\n", info.library.c_str(), info.reference,
              !info.openblas_config.empty(), info.openblas_core.c_str());
}

// What a process under `libblas_dir`/libblas.so.3 prints (stdout and stderr),
// with `environment` ("NAME=value ...") added.
std::string run_under_blas(const std::filesystem::path& libblas_dir, const std::string& environment = "") {
  const std::string command = environment + " LT_BLAS_CHILD=1 LD_LIBRARY_PATH=" + libblas_dir.string() +
                              " /proc/" + std::to_string(::getpid()) + "/exe --gtest_filter=BlasChild.* 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

// Whether the LibTorch built against multiplies through the process's
// libblas.so.3 (Debian's does; PyPI's 2.x has MKL linked into libtorch_cpu.so).
bool torch_calls_libblas() { return lt::blas_info().library.find("libblas.so") != std::string::npos; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Under Debian's reference BLAS a Trainer warns, once per process, naming the
// library and the package to install; under OpenBLAS it says nothing.
TEST(Blas, TheReferenceBlasIsWarnedAboutOnce) {
  std::filesystem::path lib;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib")) {
    if (std::filesystem::exists(entry.path() / "blas" / "libblas.so.3")) lib = entry.path();
  }
  if (lib.empty() || !std::filesystem::exists(lib / "openblas-openmp" / "libblas.so.3")) {
    GTEST_SKIP() << "needs Debian's reference BLAS (libblas3) and OpenBLAS (libopenblas0-openmp) installed";
  }
  if (!torch_calls_libblas()) GTEST_SKIP() << "this LibTorch has a BLAS of its own: " << lt::blas_info().library;
  const std::string reference = run_under_blas(lib / "blas");
  const std::string warning = "lightning-cpp warning: LibTorch calls the reference BLAS (" +
                              std::filesystem::canonical(lib / "blas" / "libblas.so.3").string() + ")";
  EXPECT_EQ(count(reference, warning), 1u) << reference;
  EXPECT_NE(reference.find("apt-get install libopenblas0-openmp"), std::string::npos) << reference;
  EXPECT_NE(reference.find("reference=1 openblas=0"), std::string::npos) << reference;
  const std::string openblas = run_under_blas(lib / "openblas-openmp");
  EXPECT_EQ(openblas.find("reference BLAS"), std::string::npos) << openblas;
  EXPECT_NE(openblas.find("blas_info: " + std::filesystem::canonical(lib / "openblas-openmp" / "libblas.so.3")
                              .string() + " reference=0 openblas=1"),
            std::string::npos)
      << openblas;
}

// OpenBLAS on kernels older than the CPU (as it falls back to Prescott's on a
// CPU model it does not know): a Trainer warns once with the OPENBLAS_CORETYPE
// to set; on the kernels it names, it says nothing.
TEST(Blas, OpenBlasOnKernelsOlderThanTheCpuIsWarnedAbout) {
  const lt::CpuInfo& cpu = lt::cpu_info();
  if (!cpu.has("avx2") || !cpu.has("fma")) GTEST_SKIP() << "needs a CPU with AVX2 and FMA";
  std::filesystem::path lib;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib")) {
    if (std::filesystem::exists(entry.path() / "openblas-openmp" / "libblas.so.3")) lib = entry.path();
  }
  if (lib.empty()) GTEST_SKIP() << "needs OpenBLAS (libopenblas0-openmp) installed";
  if (!torch_calls_libblas()) GTEST_SKIP() << "this LibTorch has a BLAS of its own: " << lt::blas_info().library;
  const std::string coretype = lt::openblas_coretype_advice(lt::BlasInfo{"", "", "Prescott"}, cpu);
  ASSERT_TRUE(coretype == "SkylakeX" || coretype == "Haswell") << coretype;
  const std::string old = run_under_blas(lib / "openblas-openmp", "OPENBLAS_CORETYPE=Prescott");
  EXPECT_NE(old.find("core=Prescott"), std::string::npos) << old;
  EXPECT_EQ(count(old, "lightning-cpp warning: OpenBLAS does not know this CPU"), 1u) << old;
  EXPECT_NE(old.find("export OPENBLAS_CORETYPE=" + coretype), std::string::npos) << old;
  const std::string advised = run_under_blas(lib / "openblas-openmp", "OPENBLAS_CORETYPE=" + coretype);
  EXPECT_NE(advised.find("core=" + coretype), std::string::npos) << advised;
  EXPECT_EQ(advised.find("OpenBLAS does not know"), std::string::npos) << advised;
}

// The advice by kernels and CPU, whatever this machine is.
TEST(Blas, TheCoreTypeAdviceFollowsTheCpusVectorUnits) {
  const lt::CpuInfo avx2{"an AVX2 CPU", {"avx2", "fma"}};
  const lt::CpuInfo avx512{"an AVX-512 CPU", {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}};
  const lt::CpuInfo old{"an SSE CPU", {"sse3"}};
  const auto advice = [](const char* core, const lt::CpuInfo& cpu) {
    return lt::openblas_coretype_advice(lt::BlasInfo{"libopenblas.so.0", "", core}, cpu);
  };
  EXPECT_EQ(advice("Prescott", avx2), "Haswell");
  EXPECT_EQ(advice("Haswell", avx2), "");
  EXPECT_EQ(advice("Zen", avx2), "");
  EXPECT_EQ(advice("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(advice("Haswell", avx512), "SkylakeX");  // an AMD EPYC of family 26: sgemm 91 -> 171 GFLOP/s
  EXPECT_EQ(advice("Zen", avx512), "SkylakeX");
  EXPECT_EQ(advice("SkylakeX", avx512), "");
  EXPECT_EQ(advice("Cooperlake", avx512), "");
  EXPECT_EQ(advice("Prescott", old), "");   // nothing better to run
  EXPECT_EQ(lt::openblas_coretype_advice(lt::BlasInfo{"/usr/lib/libblas.so.3", "", ""}, avx512), "");  // not OpenBLAS
}

}  // namespace
