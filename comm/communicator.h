// The transport seam: a Communicator moves raw CPU (or, for NCCL, device) buffers between
// the ranks of one job. Every collective is in place and must be called by every rank in
// the same order with the same count, dtype and ReduceOp (comm/reduce.h). Async forms return
// a CommHandle; the buffer belongs to the operation until the handle has completed.
// A Communicator is not thread-safe: one thread at a time (in training: the CommEngine's).
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "comm/reduce.h"
#include "core/dtype.h"

namespace ringstep {

// A failed or inconsistent communication (MPI error, mismatched collective, lost peer).
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& what) : std::runtime_error(what) {}
};

// One in-flight operation. test() advances it without blocking; wait() blocks under the
// polite waiting policy of comm/backoff.h (never a hard spin).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // true once complete (and from then on); throws on failure
  virtual void wait();
};

// A shared, copyable reference to a CommRequest. An empty handle is already complete.
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<CommRequest> req) : req_(std::move(req)) {}
  bool test() const { return !req_ || req_->test(); }
  void wait() const {
    if (req_) req_->wait();
  }
  bool empty() const { return !req_; }

 private:
  std::shared_ptr<CommRequest> req_;
};

// The part of `count` elements that rank `rank` of `nranks` owns after a reduce-scatter (and
// contributes to an allgather): contiguous, in rank order, the first count % nranks
// ranks one element longer. Ranks beyond count own nothing.
struct Shard {
  size_t offset = 0;
  size_t count = 0;
};
Shard shard_of(size_t count, int nranks, int rank);

// How point-to-point bytes move, for algorithms that size a pipeline by it (the ring's
// sub-chunks, comm/ring_allreduce.h): copied by the receiving rank's own CPU (shared
// memory), or carried by a link while the CPUs compute (a network, or link emulation).
enum class TransferPath { cpu_copy, link };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the ranks on this node
  virtual int local_size() const = 0;

  // Point-to-point, matched in posting order per (peer, tag); 0 <= tag < 32768.
  virtual CommHandle isend(const void* buf, size_t count, DType dt, int peer, int tag) = 0;
  virtual CommHandle irecv(void* buf, size_t count, DType dt, int peer, int tag) = 0;
  void send(const void* buf, size_t count, DType dt, int peer, int tag) {
    isend(buf, count, dt, peer, tag).wait();
  }
  void recv(void* buf, size_t count, DType dt, int peer, int tag) {
    irecv(buf, count, dt, peer, tag).wait();
  }

  // Collectives of the transport itself ("native"). Reductions apply `op` element-wise;
  // fp16/bf16 sums are done in fp32 at each step and rounded back to nearest even.
  //   allreduce:      buf[0, count) = op over ranks
  //   reduce_scatter: buf holds count elements; on return shard_of(count, size, rank) of
  //                   buf holds op over ranks of that shard; the rest of buf is unspecified
  //   allgather:      shard_of(count, size, rank) of buf is this rank's input; on return
  //                   all of buf holds every rank's shard
  //   alltoall:       count % size == 0; block j (count/size elements) goes to rank j and
  //                   is replaced by what rank j sent to this rank
  //   broadcast:      root's buf to every rank
  virtual CommHandle allreduce_async(void* buf, size_t count, DType dt, ReduceOp op) = 0;
  virtual CommHandle reduce_scatter_async(void* buf, size_t count, DType dt, ReduceOp op) = 0;
  virtual CommHandle allgather_async(void* buf, size_t count, DType dt) = 0;
  virtual CommHandle alltoall_async(void* buf, size_t count, DType dt) = 0;
  virtual CommHandle broadcast_async(void* buf, size_t count, DType dt, int root) = 0;
  virtual CommHandle barrier_async() = 0;

  // Blocking forms; a transport may override them with faster blocking calls.
  virtual void allreduce(void* buf, size_t count, DType dt, ReduceOp op) {
    allreduce_async(buf, count, dt, op).wait();
  }
  virtual void reduce_scatter(void* buf, size_t count, DType dt, ReduceOp op) {
    reduce_scatter_async(buf, count, dt, op).wait();
  }
  virtual void allgather(void* buf, size_t count, DType dt) {
    allgather_async(buf, count, dt).wait();
  }
  virtual void alltoall(void* buf, size_t count, DType dt) {
    alltoall_async(buf, count, dt).wait();
  }
  virtual void broadcast(void* buf, size_t count, DType dt, int root) {
    broadcast_async(buf, count, dt, root).wait();
  }
  virtual void barrier() { barrier_async().wait(); }

  // Untyped gather of small records (metadata, checksums, step times): rank r's
  // bytes_per_rank bytes sit at buf + r * bytes_per_rank, in and out. Blocking.
  virtual void allgather_bytes(void* buf, size_t bytes_per_rank) = 0;

  // What this transport's point-to-point transfers are (see TransferPath).
  virtual TransferPath transfer_path() const = 0;

  // Throws CommError when this transport cannot be driven from a CommEngine's thread while
  // the thread that made it may still make an occasional call of its own (comm/engine.h).
  virtual void check_thread_support() const {}

  // Diagnostics for a watchdog on another thread: the peer whose message the last
  // unfinished wait was for, or -1 (none, or inside a transport collective).
  virtual int blocked_on_peer() const { return -1; }
  // Ends the whole job (all ranks) with `code`; for a watchdog that found a hang.
  [[noreturn]] virtual void abort_job(int code) = 0;
};

}  // namespace ringstep
