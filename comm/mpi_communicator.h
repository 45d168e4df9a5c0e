// MPI transport (CPU buffers). MpiSession owns MPI's lifetime; MpiCommunicator wraps a
// private duplicate of a communicator (so ringstep's messages never match anyone else's)
// with MPI_ERRORS_RETURN set, every call checked by MPI_CHECK.
//
// Thread level: MpiSession asks for MPI_THREAD_MULTIPLE, so that a CommEngine thread makes
// MPI calls during a step while the main thread may still make an occasional one (a barrier
// or gather between steps). MPI_THREAD_SERIALIZED is accepted: then no other thread may call
// MPI while a CommEngine has work in flight (CommEngine::wait_all() first).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/link.h"

namespace ringstep {

class MpiSession {
 public:
  // Initialises MPI unless it already is (then this session neither owns nor finalizes it).
  MpiSession(int* argc, char*** argv);
  ~MpiSession();  // MPI_Finalize, if this session initialised MPI
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int thread_level() const { return thread_level_; }  // MPI_THREAD_* actually provided

 private:
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

// MPI_Query_thread, or MPI_THREAD_SINGLE when MPI is not initialised.
int mpi_thread_level();

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD, const LinkConfig& link = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  CommHandle isend(const void* buf, size_t count, DType dt, int peer, int tag) override;
  CommHandle irecv(void* buf, size_t count, DType dt, int peer, int tag) override;

  CommHandle allreduce_async(void* buf, size_t count, DType dt, ReduceOp op) override;
  CommHandle reduce_scatter_async(void* buf, size_t count, DType dt, ReduceOp op) override;
  CommHandle allgather_async(void* buf, size_t count, DType dt) override;
  CommHandle alltoall_async(void* buf, size_t count, DType dt) override;
  CommHandle broadcast_async(void* buf, size_t count, DType dt, int root) override;
  CommHandle barrier_async() override;

  void allreduce(void* buf, size_t count, DType dt, ReduceOp op) override;
  void broadcast(void* buf, size_t count, DType dt, int root) override;
  void barrier() override;
  void allgather_bytes(void* buf, size_t bytes_per_rank) override;

  // link under link emulation; otherwise cpu_copy (Open MPI's shared-memory transport,
  // where the receiver's CPU copies; a job over several nodes is treated alike).
  TransferPath transfer_path() const override;
  // Needs MPI_THREAD_SERIALIZED or more (see the thread level above).
  void check_thread_support() const override;
  int blocked_on_peer() const override { return blocked_on_peer_.load(std::memory_order_relaxed); }
  [[noreturn]] void abort_job(int code) override;

  const LinkConfig& link() const { return link_; }
  MPI_Comm mpi_comm() const { return comm_; }

  // Internal to the MPI requests (comm/mpi_communicator.cpp).
  struct PendingSend;
  void post_due_sends();
  void note_blocked(int peer) { blocked_on_peer_.store(peer, std::memory_order_relaxed); }

 private:
  MPI_Datatype mpi_type(DType dt) const;
  MPI_Op mpi_op(DType dt, ReduceOp op) const;
  // Under link emulation: when a transport collective moving `messages` messages of
  // `bytes` each to the next rank may complete (ring-optimal volume); else 0.
  int64_t pace_collective(int messages, size_t bytes);
  void sleep_until(int64_t t_ns) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  // User-defined ops for fp16/bf16 (comm/reduce.h's kernels), by [ReduceOp][dtype is bf16].
  MPI_Op half_ops_[3][2] = {
      {MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL}};
  LinkConfig link_;
  std::vector<LinkPacer> pacers_;                               // per destination rank
  std::vector<std::deque<std::shared_ptr<PendingSend>>> held_;  // per destination, by release
  std::atomic<int> blocked_on_peer_{-1};
};

}  // namespace ringstep
