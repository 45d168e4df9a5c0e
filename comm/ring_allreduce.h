// ringstep's own AllReduce over point-to-point messages (Patarasuk & Yuan 2009; the
// Baidu/Horovod ring): a reduce-scatter then an allgather, N-1 steps each, in place.
//
// Segment k of the buffer is shard_of(count, N, k) (communicator.h). At step s (0-based,
// s < 2(N-1)) rank r sends segment (r-s-1) mod N to rank r+1 and receives segment
// (r-s-2) mod N from rank r-1; in the first N-1 steps it adds what it receives into its
// copy, in the last N-1 it overwrites. After the reduce-scatter half rank r therefore owns
// the complete sum of segment r (shard_of(count, N, r)), which is what the allgather half
// starts from. Each segment is cut into the same number of sub-chunks (~chunk_bytes) and the
// steps run as one pipeline: sub-chunk j of step s+1 leaves as soon as sub-chunk j of step s
// is reduced, while `window` sub-chunks are in flight each way (2 = double buffering), so the
// reduction of one sub-chunk overlaps the transfer of the next. The sub-chunk size is the
// ring's own rule (ring_default_chunk_bytes) unless RingOptions::chunk_bytes sets it.
//
// The reduction is RingOptions::op (comm/reduce.h): sums of fp16/bf16 are done in fp32 at
// every hop and rounded back to nearest even; max and min are exact. Every rank ends with
// bitwise identical values. Messages of at most small_bytes take a latency-optimal
// path instead: recursive doubling (one exchange for 2 ranks; Thakur et al. 2005, with the
// non-power-of-two fold), also our own point-to-point code.
#pragma once

#include <cstddef>
#include <string>

#include "comm/communicator.h"
#include "core/config.h"  // AllreduceAlgo

namespace ringstep {

struct RingOptions {
  ReduceOp op = ReduceOp::sum;    // element-wise reduction (comm/reduce.h)
  bool average = false;           // divide the sum by the world size (in the last hop); sum only
  size_t chunk_bytes = 0;         // pipelining sub-chunk; 0 = ring_default_chunk_bytes()
  int window = 2;                 // sub-chunks in flight per direction
  size_t small_bytes = 16 << 10;  // at or below: recursive doubling (ring_allreduce only)
  int tag = 0x5249;               // point-to-point tag of ring messages
};

// Throws std::invalid_argument, before any message moves, for average with an op other
// than sum.
void ring_allreduce(Communicator& comm, void* buf, size_t count, DType dt,
                    const RingOptions& opt = {});
// The halves on their own (same layout and contracts as Communicator::reduce_scatter and
// Communicator::allgather; `op` and `average` apply to the reduce-scatter).
void ring_reduce_scatter(Communicator& comm, void* buf, size_t count, DType dt,
                         const RingOptions& opt = {});
void ring_allgather(Communicator& comm, void* buf, size_t count, DType dt,
                    const RingOptions& opt = {});

// AllReduce by the chosen algorithm: ring_allreduce, or the transport's own
// (Communicator::allreduce with opt.op, then a division when averaging).
void allreduce(Communicator& comm, AllreduceAlgo algo, void* buf, size_t count, DType dt,
               const RingOptions& opt = {});

// The ring's sub-chunk size for a largest segment of segment_bytes over PATH (used when
// RingOptions::chunk_bytes is 0; docs/comm.md has the measurements behind it):
//   cpu_copy: the receiver's CPU makes the copy, so it cannot reduce one sub-chunk while the
//             next arrives; sub-chunks buy only cache locality (the reduction reads staged
//             data still in L2) and each costs a rendezvous: 512 KiB, or the whole segment
//             when that would be fewer than 4 sub-chunks.
//   link:     the link is the bottleneck and the copy is cheap: 128 KiB keeps the pipeline
//             full, so pipelining hides all but one sub-chunk's transfer.
size_t ring_default_chunk_bytes(size_t segment_bytes, TransferPath path);

// Sub-chunks per segment: ceil(largest segment bytes / chunk_bytes), at least 1
// (chunk_bytes must be resolved, i.e. > 0).
size_t ring_chunks_per_segment(size_t count, int nranks, DType dt, size_t chunk_bytes);

// The ring's schedule (see the top of this file), one home for this host ring and the
// device ring over NCCL (comm/nccl/nccl_comm.h): at step s, rank `rank` sends segment
// send_segment(s) to its right neighbour and receives recv_segment(s) from its left, adding
// it in during the first N-1 (reducing) steps. Segment k is shard_of(count, N, k), cut into
// `chunks` near-equal sub-chunks.
struct RingSchedule {
  size_t count = 0;
  int nranks = 1, rank = 0;
  size_t chunks = 1;

  int steps() const { return 2 * (nranks - 1); }
  bool reducing(int step) const { return step < nranks - 1; }
  int send_segment(int step) const { return wrap(rank - step - 1); }
  int recv_segment(int step) const { return wrap(rank - step - 2); }
  // Elements [offset, offset + count) of buf that sub-chunk J of SEGMENT covers.
  Shard piece(int segment, size_t j) const;

 private:
  int wrap(int a) const { return ((a % nranks) + nranks) % nranks; }
};

}  // namespace ringstep
