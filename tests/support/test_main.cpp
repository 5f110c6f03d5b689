// The main of every test binary: a process started by run_workers runs its
// worker function; otherwise gtest runs the tests.
#include <gtest/gtest.h>

#include "support/multiprocess.h"

int main(int argc, char** argv) {
  if (lt::testing::is_worker_process()) return lt::testing::run_requested_worker();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
