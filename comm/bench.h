// `ringstep bench allreduce`: an nccl-tests style table of ring vs native AllReduce, on
// MPI with host buffers or on NCCL with device buffers.
// Every rank calls run_allreduce_bench with the same options (it initialises MPI itself if
// the caller has not). Rank 0 prints one row per (size, algo) as soon as it is measured and,
// with json_path, appends one JSON object per row to that file (JSON Lines).
// Formulas and the timing method: docs/comm.md and docs/metrics.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/backoff.h"
#include "comm/ring_allreduce.h"
#include "core/config.h"  // LinkConfig
#include "core/dtype.h"

namespace ringstep {

struct AllreduceBenchOptions {
  // mpi: host buffers, our ring over MPI point-to-point vs MPI_Allreduce; nccl: device
  // buffers, our ring over NCCL send/recv vs ncclAllReduce (comm/nccl/nccl_comm.h).
  CommBackend backend = CommBackend::mpi;
  std::vector<AllreduceAlgo> algos = {AllreduceAlgo::ring, AllreduceAlgo::native};
  size_t min_bytes = size_t{1} << 10;   // -b
  size_t max_bytes = size_t{64} << 20;  // -e
  int factor = 4;                       // -f: sizes min, min*f, ... <= max
  DType dtype = DType::f32;
  int iters = 0;          // timed iterations per row; 0 = auto (~0.25 s per row, 10..1000)
  int warmup = 0;         // untimed iterations per size; 0 = auto (20 below 1 MiB, else 5)
  std::string json_path;  // "" = no JSON
  RingOptions ring;       // ring tuning (op and average are ignored: the bench sums)
  LinkConfig link;        // link emulation for both algorithms (0 = off)
  // How the ring's waits poll. The bench thread owns its core, so by default it spins as
  // MPI_Allreduce's own wait does; WaitPolicy::polite() shows the CommEngine's policy.
  WaitPolicy wait = WaitPolicy::spin();
};

// "4096", "1K", "64M", "1G", "16KiB", "2MB" (powers of 1024, case-insensitive).
// Throws InputError naming the text otherwise.
size_t parse_size_bytes(const std::string& text);
// "ring,native" -> {ring, native}; throws InputError on an unknown or empty name.
std::vector<AllreduceAlgo> parse_allreduce_algos(const std::string& csv);
// min, min*factor, ... while <= max; throws InputError when min > max or factor < 2.
std::vector<size_t> bench_sizes(size_t min_bytes, size_t max_bytes, int factor);
// busbw = algbw * 2(n-1)/n (nccl-tests).
double allreduce_busbw_factor(int nranks);

// Returns 0 when every result was correct, 1 otherwise. Throws InputError on bad options
// (on every rank alike), and for backend nccl where this build has no NCCL or no GPU.
int run_allreduce_bench(const AllreduceBenchOptions& opts);

}  // namespace ringstep
