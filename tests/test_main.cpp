// The unit-test binary's main: the same BLAS kernel selection as the ringstep command, so
// the tests exercise the kernels users run.
#include <gtest/gtest.h>

#include "core/cpu/blas_env.h"

int main(int argc, char** argv) {
  ringstep::select_runtime_env(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
