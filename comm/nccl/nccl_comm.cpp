#include "comm/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "comm/nccl/nccl_reduce.h"

namespace ringstep::nccl {
namespace {

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string what = std::string(ncclGetErrorString(r));
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    what += " (" + std::string(last) + ")";
  throw CommError(std::string("NCCL: ") + call + " failed: " + what + " at " + file + ":" +
                  std::to_string(line) + cuda::rank_suffix());
}
#define NCCL_CHECK(comm, call) check_nccl((call), (comm), #call, __FILE__, __LINE__)

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
  }
  return ncclFloat32;
}

constexpr size_t kDefaultChunkBytes = size_t(1) << 20;

size_t ring_chunks(size_t count, int n, DType dt, const RingOptions& opt) {
  return ring_chunks_per_segment(count, n, dt,
                                 opt.chunk_bytes ? opt.chunk_bytes : kDefaultChunkBytes);
}

// The ring's staging: one slot per sub-chunk of the largest segment.
size_t ring_scratch_bytes(size_t count, int n, DType dt, const RingOptions& opt) {
  const size_t chunks = ring_chunks(count, n, dt, opt);
  return chunks * ((shard_of(count, n, 0).count + chunks - 1) / chunks) * dtype_size(dt);
}

}  // namespace

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, left = 0, right = 0;
  cudaStream_t reduce_stream = nullptr;  // the ring's reductions, ordered by events
  std::vector<cudaEvent_t> events;       // grown on demand, reused by every call
  void* scratch = nullptr;
  size_t scratch_bytes = 0;

  cudaEvent_t event(size_t i) {
    while (events.size() <= i) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events.push_back(e);
    }
    return events[i];
  }
  void* staging(size_t bytes) {
    if (bytes > scratch_bytes) {
      cuda::device_free(scratch);
      scratch = cuda::device_alloc(bytes);
      scratch_bytes = bytes;
    }
    return scratch;
  }
  [[noreturn]] void abort_with(const std::string& why) {
    ncclCommAbort(comm);
    comm = nullptr;
    throw CommError("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " +
                    why + "; its ring neighbours are ranks " + std::to_string(left) + " and " +
                    std::to_string(right) + "; the communicator was aborted");
  }
};

NcclComm::NcclComm(Communicator& host) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.rank = host.rank();
  m.size = host.size();
  m.left = (m.rank + m.size - 1) % m.size;
  m.right = (m.rank + 1) % m.size;
  cuda::use_local_device();
  // Rank 0's id reaches every rank through the host communicator's byte gather.
  std::vector<ncclUniqueId> ids(size_t(m.size));
  if (m.rank == 0) NCCL_CHECK(nullptr, ncclGetUniqueId(&ids[0]));
  host.allgather_bytes(ids.data(), sizeof(ncclUniqueId));
  NCCL_CHECK(nullptr, ncclCommInitRank(&m.comm, m.size, ids[0], m.rank));
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.reduce_stream, cudaStreamNonBlocking));
}

NcclComm::~NcclComm() {
  Impl& m = *impl_;
  for (cudaEvent_t e : m.events) cudaEventDestroy(e);
  if (m.reduce_stream) cudaStreamDestroy(m.reduce_stream);
  cuda::device_free(m.scratch);
  if (m.comm) ncclCommDestroy(m.comm);
}

int NcclComm::rank() const { return impl_->rank; }
int NcclComm::size() const { return impl_->size; }

void NcclComm::allreduce_native(void* buf, size_t count, DType dt, bool average, Stream stream) {
  Impl& m = *impl_;
  NCCL_CHECK(m.comm, ncclAllReduce(buf, buf, count, nccl_type(dt), average ? ncclAvg : ncclSum,
                                   m.comm, stream));
}

// RingSchedule's steps, t = s * chunks + j, enqueued without waiting:
//   transfers on STREAM: group t sends piece (send_segment(s), j) to the right and receives
//     piece (recv_segment(s), j) from the left, into staging slot j while reducing, else
//     into buf;
//   reductions on the reduce stream: piece t is added in once its group has run (event
//     recv[t]), and signals reduced[t];
//   STREAM waits for reduced[t - chunks] before group t: that piece is what group t sends,
//     and its staging slot is what group t receives into.
// So the transfer of sub-chunk j + 1 overlaps the reduction of sub-chunk j.
void NcclComm::allreduce_ring(void* buf, size_t count, DType dt, const RingOptions& opt,
                              Stream stream) {
  Impl& m = *impl_;
  if (opt.op != ReduceOp::sum) throw std::invalid_argument("NCCL ring: sum only");
  const int n = m.size;
  if (n == 1 || count == 0) return;
  const size_t esize = dtype_size(dt);
  const size_t chunks = ring_chunks(count, n, dt, opt);
  const RingSchedule ring{count, n, m.rank, chunks};
  const size_t slot_elems = (shard_of(count, n, 0).count + chunks - 1) / chunks;
  auto* staging = static_cast<std::byte*>(m.staging(ring_scratch_bytes(count, n, dt, opt)));
  auto* data = static_cast<std::byte*>(buf);
  const size_t total = size_t(ring.steps()) * chunks;
  auto recv_event = [&](size_t t) { return m.event(2 * t); };
  auto reduced_event = [&](size_t t) { return m.event(2 * t + 1); };

  for (size_t t = 0; t < total; ++t) {
    const int s = int(t / chunks);
    const size_t j = t % chunks;
    if (s > 0 && ring.reducing(s - 1))
      CUDA_CHECK(cudaStreamWaitEvent(stream, reduced_event(t - chunks), 0));
    const Shard out = ring.piece(ring.send_segment(s), j), in = ring.piece(ring.recv_segment(s), j);
    std::byte* dst = ring.reducing(s) ? staging + j * slot_elems * esize : data + in.offset * esize;
    NCCL_CHECK(m.comm, ncclGroupStart());
    if (out.count)
      NCCL_CHECK(m.comm, ncclSend(data + out.offset * esize, out.count, nccl_type(dt), m.right,
                                  m.comm, stream));
    if (in.count)
      NCCL_CHECK(m.comm, ncclRecv(dst, in.count, nccl_type(dt), m.left, m.comm, stream));
    NCCL_CHECK(m.comm, ncclGroupEnd());
    if (!ring.reducing(s)) continue;
    CUDA_CHECK(cudaEventRecord(recv_event(t), stream));
    CUDA_CHECK(cudaStreamWaitEvent(m.reduce_stream, recv_event(t), 0));
    const float divisor = opt.average && s == n - 2 ? float(n) : 1.0f;
    launch_reduce_sum(data + in.offset * esize, dst, in.count, dt, divisor, m.reduce_stream);
    CUDA_CHECK(cudaEventRecord(reduced_event(t), m.reduce_stream));
  }
}

void NcclComm::send_recv(const std::vector<PeerSend>& sends, const std::vector<PeerRecv>& recvs,
                         Stream stream) {
  Impl& m = *impl_;
  if (sends.empty() && recvs.empty()) return;
  NCCL_CHECK(m.comm, ncclGroupStart());
  for (const PeerRecv& r : recvs)
    NCCL_CHECK(m.comm, ncclRecv(r.buf, r.bytes, ncclUint8, r.peer, m.comm, stream));
  for (const PeerSend& s : sends)
    NCCL_CHECK(m.comm, ncclSend(s.buf, s.bytes, ncclUint8, s.peer, m.comm, stream));
  NCCL_CHECK(m.comm, ncclGroupEnd());
}

void NcclComm::reserve_ring(size_t count, DType dt, const RingOptions& opt) {
  Impl& m = *impl_;
  if (m.size > 1 && count > 0) m.staging(ring_scratch_bytes(count, m.size, dt, opt));
}

void NcclComm::synchronize(Stream stream, double timeout_s) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    check_async_error();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s)
      m.abort_with("no progress for " + std::to_string(int(timeout_s)) +
                   " s (a peer died or stopped calling)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NcclComm::check_async_error() {
  if (const std::string why = async_error(); !why.empty()) impl_->abort_with(why);
}

std::string NcclComm::async_error() {
  Impl& m = *impl_;
  if (m.comm == nullptr) return "the communicator was aborted";
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(m.comm, &async);
  if (r != ncclSuccess)
    return std::string("ncclCommGetAsyncError failed: ") + ncclGetErrorString(r);
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return std::string("asynchronous error: ") + ncclGetErrorString(async);
}

void NcclComm::abort_with(const std::string& why) { impl_->abort_with(why); }

}  // namespace ringstep::nccl
