#pragma once
// What the tensorboard_logger_test binary's files share: the checker that
// decodes an events file independently of our encoder
// (tests/python/tensorboard_events.py), what it prints for a scalar, and the
// seeded fixture with a folder of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "support/seeding.h"

namespace lt::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

inline std::vector<std::filesystem::path> events_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// %.17g of a double: Python's repr and C++ spell the same double differently.
inline std::string g17(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// A decoded events file: the checker's exit code and lines, its numbers
// rewritten by g17; wall_time, the last line, taken apart.
struct Decoded {
  int rc = -1;
  std::string output;  // as printed, for failure messages
  std::vector<std::string> lines;
  double first_wall_time = 0, last_wall_time = 0;
};

inline Decoded decode(const std::filesystem::path& events) {
  const std::string cmd = std::string(kPython) + " " + LT_SOURCE_DIR + "/tests/python/tensorboard_events.py '" +
                          events.string() + "' 2>&1";
  Decoded d;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return d;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) d.output.append(buf, n);
  const int status = ::pclose(pipe);
  d.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::istringstream in(d.output);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> t;
    std::istringstream words(line);
    for (std::string w; words >> w;) t.push_back(w);
    if (t.size() == 3 && t[0] == "wall_time") {
      d.first_wall_time = std::strtod(t[1].c_str(), nullptr);
      d.last_wall_time = std::strtod(t[2].c_str(), nullptr);
      continue;
    }
    if (t.size() == 4 && t[0] == "scalar") t[3] = g17(std::strtod(t[3].c_str(), nullptr));
    if (t.size() == 5 && t[0] == "hparams" && t[3] == "number") t[4] = g17(std::strtod(t[4].c_str(), nullptr));
    std::string joined;
    for (const auto& w : t) joined += (joined.empty() ? "" : " ") + w;
    d.lines.push_back(joined);
  }
  return d;
}

// What the checker prints for a logged scalar: the value as a float32.
inline std::string scalar(int64_t step, const std::string& tag, double v) {
  return "scalar " + std::to_string(step) + " " + tag + " " + g17(static_cast<double>(static_cast<float>(v)));
}

inline std::vector<std::string> scalars(const Decoded& d, const std::string& tag = {}) {
  std::vector<std::string> out;
  for (const auto& l : d.lines) {
    if (l.rfind("scalar ", 0) == 0 && (tag.empty() || l.find(" " + tag + " ") != std::string::npos)) out.push_back(l);
  }
  return out;
}

inline int64_t step_of(const std::string& scalar_line) { return std::stoll(scalar_line.substr(7)); }

}  // namespace lt::testing

// One type for every file's TEST_F(TensorBoardLoggerTest, ...): gtest requires a test suite's tests to share
// their fixture class.
struct TensorBoardLoggerTest : lt::testing::SeedingFixture {
  static constexpr const char* kPython = lt::testing::kPython;
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_tensorboard_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The checker's dependencies (scripts/install-deps.sh installs them): a
  // missing one fails the test, as a skip would hide that nothing was checked.
  static void require_checker() {
    ASSERT_EQ(std::system((std::string(kPython) + " -c 'import google.protobuf' > /dev/null 2>&1").c_str()), 0)
        << kPython << " has no google.protobuf: apt-get install python3-protobuf (scripts/install-deps.sh)";
    ASSERT_EQ(std::system("command -v protoc > /dev/null 2>&1"), 0)
        << "no protoc: apt-get install protobuf-compiler (scripts/install-deps.sh)";
  }
  std::filesystem::path dir_;
};
