#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "comm/backoff.h"
#include "comm/mpi_check.h"
#include "comm/reduce.h"

namespace ringstep {

void mpi_check_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0;
  MPI_Error_string(code, text, &len);
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw CommError("MPI call failed on rank " + std::to_string(rank) + ": " + call + " -> " + text +
                  " (code " + std::to_string(code) + ") at " + file + ":" + std::to_string(line));
}

int mpi_thread_level() {
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Initialized(&initialized));
  MPI_CHECK(MPI_Finalized(&finalized));
  if (initialized && !finalized) MPI_CHECK(MPI_Query_thread(&level));
  return level;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) {
    MPI_CHECK(MPI_Query_thread(&thread_level_));
    return;
  }
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  owns_ = true;
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

namespace {

int to_int_count(size_t count, const char* what) {
  if (count > static_cast<size_t>(INT_MAX))
    throw CommError(std::string(what) + ": count " + std::to_string(count) +
                    " exceeds MPI's int limit; split the buffer");
  return static_cast<int>(count);
}

// MPI's user-defined op for a 16-bit dtype: the ring's kernel, so both round alike.
template <ReduceOp kOp, DType kDType>
void half_op_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce(kOp, inout, in, static_cast<size_t>(*len), kDType);
}

// By [ReduceOp][dtype is bf16], as MpiCommunicator::half_ops_.
MPI_User_function* const kHalfOpFns[3][2] = {
    {&half_op_fn<ReduceOp::sum, DType::f16>, &half_op_fn<ReduceOp::sum, DType::bf16>},
    {&half_op_fn<ReduceOp::max, DType::f16>, &half_op_fn<ReduceOp::max, DType::bf16>},
    {&half_op_fn<ReduceOp::min, DType::f16>, &half_op_fn<ReduceOp::min, DType::bf16>}};

}  // namespace

// A send held back by link emulation until its release time.
struct MpiCommunicator::PendingSend {
  const void* buf;
  int count;
  MPI_Datatype type;
  int peer, tag;
  int64_t release_ns;
  MPI_Request req = MPI_REQUEST_NULL;
  bool posted = false;
};

namespace {

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(MpiCommunicator* comm, int peer) : comm_(comm), peer_(peer) {}

  bool test() override {
    if (done_) return true;
    comm_->post_due_sends();  // a no-op without link emulation
    if (held) {
      if (!held->posted) return false;
      req = held->req;
      held.reset();
    }
    int flag = 0;
    MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    if (!flag) {
      if (peer_ >= 0) comm_->note_blocked(peer_);
      return false;
    }
    if (not_before_ns && steady_now_ns() < not_before_ns) return false;
    if (on_complete) on_complete();
    done_ = true;
    return true;
  }

  MPI_Request req = MPI_REQUEST_NULL;
  std::shared_ptr<MpiCommunicator::PendingSend> held;  // send not yet handed to MPI
  int64_t not_before_ns = 0;                           // link emulation of collectives
  std::function<void()> on_complete;
  std::vector<int> counts, displs;  // arrays MPI reads until completion
  std::vector<std::byte> staging;

 private:
  MpiCommunicator* comm_;
  int peer_;
  bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent, const LinkConfig& link) : link_(link) {
  MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_CHECK(MPI_Comm_free(&node));
  for (int op = 0; op < 3; ++op)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      MPI_CHECK(MPI_Op_create(kHalfOpFns[op][bf16], /*commute=*/1, &half_ops_[op][bf16]));
  if (link_enabled(link_)) {
    pacers_.assign(static_cast<size_t>(size_), LinkPacer(link_));
    held_.resize(static_cast<size_t>(size_));
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& ops : half_ops_)
    for (MPI_Op& op : ops)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

MPI_Datatype MpiCommunicator::mpi_type(DType dt) const {
  return dt == DType::f32 ? MPI_FLOAT : MPI_UINT16_T;
}

MPI_Op MpiCommunicator::mpi_op(DType dt, ReduceOp op) const {
  if (dt != DType::f32) return half_ops_[int(op)][dt == DType::bf16 ? 1 : 0];
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

void MpiCommunicator::post_due_sends() {
  if (held_.empty()) return;
  const int64_t now = steady_now_ns();
  for (auto& queue : held_) {
    while (!queue.empty() && queue.front()->release_ns <= now) {
      PendingSend& s = *queue.front();
      MPI_CHECK(MPI_Isend(s.buf, s.count, s.type, s.peer, s.tag, comm_, &s.req));
      s.posted = true;
      queue.pop_front();
    }
  }
}

CommHandle MpiCommunicator::isend(const void* buf, size_t count, DType dt, int peer, int tag) {
  auto r = std::make_shared<MpiRequest>(this, peer);
  const int n = to_int_count(count, "isend");
  if (pacers_.empty() || peer == rank_) {
    MPI_CHECK(MPI_Isend(buf, n, mpi_type(dt), peer, tag, comm_, &r->req));
    return CommHandle(r);
  }
  const size_t p = static_cast<size_t>(peer);
  const int64_t release = pacers_.at(p).schedule(steady_now_ns(), count * dtype_size(dt));
  r->held = std::make_shared<PendingSend>(PendingSend{buf, n, mpi_type(dt), peer, tag, release});
  held_[p].push_back(r->held);
  post_due_sends();
  return CommHandle(r);
}

CommHandle MpiCommunicator::irecv(void* buf, size_t count, DType dt, int peer, int tag) {
  auto r = std::make_shared<MpiRequest>(this, peer);
  MPI_CHECK(MPI_Irecv(buf, to_int_count(count, "irecv"), mpi_type(dt), peer, tag, comm_, &r->req));
  return CommHandle(r);
}

int64_t MpiCommunicator::pace_collective(int messages, size_t bytes) {
  if (pacers_.empty() || size_ == 1) return 0;
  LinkPacer& next = pacers_[static_cast<size_t>((rank_ + 1) % size_)];
  const int64_t now = steady_now_ns();
  int64_t release = now;
  for (int i = 0; i < messages; ++i) release = next.schedule(now, bytes);
  return release;
}

void MpiCommunicator::sleep_until(int64_t t_ns) const {
  Backoff backoff;
  while (steady_now_ns() < t_ns) backoff.pause();
}

CommHandle MpiCommunicator::allreduce_async(void* buf, size_t count, DType dt, ReduceOp op) {
  auto r = std::make_shared<MpiRequest>(this, -1);
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, to_int_count(count, "allreduce"), mpi_type(dt),
                           mpi_op(dt, op), comm_, &r->req));
  r->not_before_ns = pace_collective(2 * (size_ - 1), count * dtype_size(dt) / size_);
  return CommHandle(r);
}

void MpiCommunicator::allreduce(void* buf, size_t count, DType dt, ReduceOp op) {
  const int64_t not_before = pace_collective(2 * (size_ - 1), count * dtype_size(dt) / size_);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, to_int_count(count, "allreduce"), mpi_type(dt),
                          mpi_op(dt, op), comm_));
  sleep_until(not_before);
}

CommHandle MpiCommunicator::reduce_scatter_async(void* buf, size_t count, DType dt, ReduceOp op) {
  to_int_count(count, "reduce_scatter");
  auto r = std::make_shared<MpiRequest>(this, -1);
  for (int k = 0; k < size_; ++k)
    r->counts.push_back(static_cast<int>(shard_of(count, size_, k).count));
  MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, r->counts.data(), mpi_type(dt), mpi_op(dt, op),
                                comm_, &r->req));
  // MPI leaves an in-place result at the start of buf; our contract puts it at the shard.
  const Shard mine = shard_of(count, size_, rank_);
  const size_t esize = dtype_size(dt);
  auto* bytes = static_cast<std::byte*>(buf);
  r->on_complete = [bytes, mine, esize] {
    std::memmove(bytes + mine.offset * esize, bytes, mine.count * esize);
  };
  r->not_before_ns = pace_collective(size_ - 1, count * esize / size_);
  return CommHandle(r);
}

CommHandle MpiCommunicator::allgather_async(void* buf, size_t count, DType dt) {
  to_int_count(count, "allgather");
  auto r = std::make_shared<MpiRequest>(this, -1);
  for (int k = 0; k < size_; ++k) {
    const Shard s = shard_of(count, size_, k);
    r->counts.push_back(static_cast<int>(s.count));
    r->displs.push_back(static_cast<int>(s.offset));
  }
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, r->counts.data(),
                            r->displs.data(), mpi_type(dt), comm_, &r->req));
  r->not_before_ns = pace_collective(size_ - 1, count * dtype_size(dt) / size_);
  return CommHandle(r);
}

CommHandle MpiCommunicator::alltoall_async(void* buf, size_t count, DType dt) {
  if (count % static_cast<size_t>(size_) != 0)
    throw CommError("alltoall: count " + std::to_string(count) + " is not a multiple of the " +
                    std::to_string(size_) + " ranks");
  const int block = to_int_count(count / size_, "alltoall");
  auto r = std::make_shared<MpiRequest>(this, -1);
  const size_t bytes = count * dtype_size(dt);
  r->staging.resize(bytes);
  if (bytes) std::memcpy(r->staging.data(), buf, bytes);
  MPI_CHECK(MPI_Ialltoall(r->staging.data(), block, mpi_type(dt), buf, block, mpi_type(dt), comm_,
                          &r->req));
  r->not_before_ns = pace_collective(size_ - 1, bytes / size_);
  return CommHandle(r);
}

CommHandle MpiCommunicator::broadcast_async(void* buf, size_t count, DType dt, int root) {
  auto r = std::make_shared<MpiRequest>(this, -1);
  MPI_CHECK(MPI_Ibcast(buf, to_int_count(count, "broadcast"), mpi_type(dt), root, comm_, &r->req));
  r->not_before_ns = pace_collective(1, count * dtype_size(dt));
  return CommHandle(r);
}

void MpiCommunicator::broadcast(void* buf, size_t count, DType dt, int root) {
  const int64_t not_before = pace_collective(1, count * dtype_size(dt));
  MPI_CHECK(MPI_Bcast(buf, to_int_count(count, "broadcast"), mpi_type(dt), root, comm_));
  sleep_until(not_before);
}

CommHandle MpiCommunicator::barrier_async() {
  auto r = std::make_shared<MpiRequest>(this, -1);
  MPI_CHECK(MPI_Ibarrier(comm_, &r->req));
  r->not_before_ns = pace_collective(1, 0);
  return CommHandle(r);
}

void MpiCommunicator::barrier() {
  const int64_t not_before = pace_collective(1, 0);
  MPI_CHECK(MPI_Barrier(comm_));
  sleep_until(not_before);
}

void MpiCommunicator::allgather_bytes(void* buf, size_t bytes_per_rank) {
  MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                          to_int_count(bytes_per_rank, "allgather_bytes"), MPI_BYTE, comm_));
}

TransferPath MpiCommunicator::transfer_path() const {
  return link_enabled(link_) ? TransferPath::link : TransferPath::cpu_copy;
}

void MpiCommunicator::check_thread_support() const {
  if (mpi_thread_level() < MPI_THREAD_SERIALIZED)
    throw CommError(
        "CommEngine needs MPI initialised with at least MPI_THREAD_SERIALIZED (MpiSession "
        "asks for MPI_THREAD_MULTIPLE); this MPI provides less");
}

void MpiCommunicator::abort_job(int code) {
  MPI_Abort(comm_, code);
  std::_Exit(code);
}

}  // namespace ringstep
