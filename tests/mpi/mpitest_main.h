// main() for a multi-rank GoogleTest binary (tests/mpi/*_mpitest.cpp), run by ctest under
// mpirun. MPI is initialised through comm/'s MpiSession (MPI_THREAD_MULTIPLE, as in
// training); only rank 0 prints the normal gtest output, other ranks print their failures
// prefixed with the rank; the exit code is non-zero when any rank failed.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_communicator.h"

namespace ringstep::testing {

// The world communicator of this test binary (valid inside tests).
inline MpiCommunicator*& world_ptr() {
  static MpiCommunicator* comm = nullptr;
  return comm;
}
inline MpiCommunicator& world() { return *world_ptr(); }

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

inline int run_mpi_tests(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int failed = 0;
  {
    MpiCommunicator comm(MPI_COMM_WORLD);
    world_ptr() = &comm;
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (comm.rank() != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(comm.rank()));
    }
    std::vector<int> results(static_cast<size_t>(comm.size()));
    results[static_cast<size_t>(comm.rank())] = RUN_ALL_TESTS() != 0;
    comm.allgather_bytes(results.data(), sizeof(int));
    for (size_t r = 0; r < results.size(); ++r) {
      if (results[r] && comm.rank() == 0) std::fprintf(stderr, "tests failed on rank %zu\n", r);
      failed |= results[r];
    }
    world_ptr() = nullptr;
  }
  return failed;
}

}  // namespace ringstep::testing
