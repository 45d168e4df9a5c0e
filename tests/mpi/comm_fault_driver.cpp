// A tiny data-parallel loop for the fault tests (comm_fault_test.sh): every rank runs ring
// AllReduces through a CommEngine; at iteration 5 rank 1 either dies (SIGKILL) or stops
// taking part (hangs in sleep). The others must not hang: mpirun or the engine's watchdog
// has to end the job with a non-zero status and a message naming rank 1.
//   comm_fault_driver kill|hang [watchdog_timeout_s]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/engine.h"
#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  using namespace ringstep;
  MpiSession session(&argc, &argv);
  const bool kill_mode = argc > 1 && std::strcmp(argv[1], "kill") == 0;
  EngineOptions opts;
  opts.timeout_s = argc > 2 ? std::atof(argv[2]) : 10;
  MpiCommunicator comm;
  CommEngine engine(comm, opts);
  std::vector<float> grads(1 << 18, 1.0f);
  for (int step = 0; step < 100000; ++step) {
    if (step == 5 && comm.rank() == 1) {
      std::fprintf(stderr, "[rank 1] %s at step %d\n", kill_mode ? "raising SIGKILL" : "hanging",
                   step);
      std::fflush(stderr);
      if (kill_mode) raise(SIGKILL);
      for (;;) pause();
    }
    engine.wait(engine.enqueue_allreduce(grads.data(), grads.size(), DType::f32,
                                         AllreduceAlgo::ring, /*average=*/true, /*tag=*/0));
    if (comm.rank() == 0 && step < 10) std::printf("step %d ok\n", step);
    std::fflush(stdout);
  }
  std::fprintf(stderr, "[rank %d] finished without noticing the fault\n", comm.rank());
  return 3;
}
