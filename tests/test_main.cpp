// The unit-test binary's main: the same BLAS kernel selection as the ringstep command, so
// the tests exercise the kernels users run. The tests that launch `mpiexec` (the gallery)
// may run as root, as CI does: Open MPI refuses that unless told, so it is told here, for
// every way of running the binary (ctest or by hand).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/cpu/blas_env.h"

int main(int argc, char** argv) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", /*overwrite=*/0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  ringstep::select_runtime_env(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
