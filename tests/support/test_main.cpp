// The main of every test binary: a process started by run_workers runs its
// worker function; otherwise gtest runs the tests, in a folder of their own
// (what a Trainer writes by default, lightning_logs/, stays out of the build
// tree and out of other tests' way), removed at the end. Workers inherit it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/multiprocess.h"

int main(int argc, char** argv) {
  if (lt::testing::is_worker_process()) return lt::testing::run_requested_worker();
  ::testing::InitGoogleTest(&argc, argv);
  char tmpl[] = "/tmp/lt_test_cwd_XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (dir == nullptr || ::chdir(dir) != 0) {
    std::perror("test main: a working folder in /tmp");
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}
