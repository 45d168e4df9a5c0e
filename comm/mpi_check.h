// MPI_CHECK(call): every MPI call in comm/ goes through it. On failure it throws CommError
// naming the call, MPI's error string and class, file:line and the rank in MPI_COMM_WORLD.
// Communicators made by comm/ use MPI_ERRORS_RETURN so that failures reach this check.
#pragma once

#include <mpi.h>

namespace ringstep {

void mpi_check_failed(int code, const char* call, const char* file, int line);

}  // namespace ringstep

#define MPI_CHECK(call)                                                          \
  do {                                                                           \
    const int ringstep_mpi_rc_ = (call);                                         \
    if (ringstep_mpi_rc_ != MPI_SUCCESS)                                         \
      ::ringstep::mpi_check_failed(ringstep_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
