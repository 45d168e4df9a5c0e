#include "comm/ring_allreduce.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/backoff.h"
#include "comm/reduce.h"

namespace ringstep {
namespace {

// Staging for received sub-chunks, kept per thread so steady-state calls never allocate
// (a fresh 256 KiB malloc is an mmap and page faults on every call).
std::byte* scratch(size_t bytes) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

int mod(int a, int n) { return ((a % n) + n) % n; }


// Steps [first_step, end_step) of the 2(N-1)-step ring (see the header), pipelined.
// Relative index t = (s - first_step) * C + j names sub-chunk j of step s. Dependencies:
//   send t    needs recv t-C done (that piece is what step s-1 received), unless t < C;
//   recv t    needs a free staging slot (reduce-scatter steps: recv t-W reduced), and in
//             allgather steps, which write into buf, send t-(N-1)C done (the last send
//             that read that piece).
void ring_steps(Communicator& comm, std::byte* buf, size_t count, DType dt, int first_step,
                int end_step, const RingOptions& opt) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || count == 0 || first_step >= end_step) return;
  const size_t esize = dtype_size(dt);
  const size_t segment_bytes = shard_of(count, n, 0).count * esize;  // the largest
  const size_t chunk_bytes = opt.chunk_bytes
                                 ? opt.chunk_bytes
                                 : ring_default_chunk_bytes(segment_bytes, comm.transfer_path());
  const size_t chunks = ring_chunks_per_segment(count, n, dt, chunk_bytes);
  const size_t window = static_cast<size_t>(std::max(1, opt.window));
  const size_t slot_elems = (shard_of(count, n, 0).count + chunks - 1) / chunks;
  std::byte* staging = scratch(window * slot_elems * esize);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t total = static_cast<size_t>(end_step - first_step) * chunks;
  const size_t lap = static_cast<size_t>(n - 1) * chunks;
  const RingSchedule ring{count, n, r, chunks};

  auto step_of = [&](size_t t) { return first_step + static_cast<int>(t / chunks); };
  auto slot = [&](size_t t) { return staging + (t % window) * slot_elems * esize; };

  std::vector<CommHandle> recvs(window), sends(window);
  size_t recv_posted = 0, recv_done = 0, send_posted = 0, send_done = 0;
  Backoff backoff;
  while (recv_done < total || send_done < total) {
    bool progress = false;
    while (recv_posted < total && recv_posted < recv_done + window) {
      const size_t t = recv_posted;
      const int s = step_of(t);
      const bool reducing = ring.reducing(s);
      if (!reducing && t >= lap && send_done <= t - lap) break;
      const Shard p = ring.piece(ring.recv_segment(s), t % chunks);
      void* dst = reducing ? slot(t) : buf + p.offset * esize;
      recvs[t % window] = p.count ? comm.irecv(dst, p.count, dt, left, opt.tag) : CommHandle();
      ++recv_posted;
    }
    while (send_posted < total && send_posted < send_done + window &&
           (send_posted < chunks || send_posted - chunks < recv_done)) {
      const size_t t = send_posted;
      const Shard p = ring.piece(ring.send_segment(step_of(t)), t % chunks);
      sends[t % window] =
          p.count ? comm.isend(buf + p.offset * esize, p.count, dt, right, opt.tag) : CommHandle();
      ++send_posted;
    }
    if (recv_done < recv_posted && recvs[recv_done % window].test()) {
      const size_t t = recv_done;
      const int s = step_of(t);
      if (ring.reducing(s)) {
        const Shard p = ring.piece(ring.recv_segment(s), t % chunks);
        const float divisor = (opt.average && s == n - 2) ? static_cast<float>(n) : 1.0f;
        reduce(opt.op, buf + p.offset * esize, slot(t), p.count, dt, divisor);
      }
      recvs[t % window] = CommHandle();
      ++recv_done;
      progress = true;
    }
    if (send_done < send_posted && sends[send_done % window].test()) {
      sends[send_done % window] = CommHandle();
      ++send_done;
      progress = true;
    }
    if (progress) {
      backoff.reset();
    } else {
      backoff.pause();
    }
  }
}

// Recursive doubling: log2(N) full-buffer exchanges. With N not a power of two, the first
// 2*rem ranks fold pairwise (even sends to odd) into a power-of-two group and get the
// result back at the end. Partners compute op(a, b) and op(b, a), equal to the bit (IEEE
// addition; max and min by ReduceOp's tie rules), so every rank ends with the same bits.
void recursive_doubling(Communicator& comm, std::byte* buf, size_t count, DType dt,
                        const RingOptions& opt) {
  const int n = comm.size(), r = comm.rank();
  std::byte* tmp = scratch(count * dtype_size(dt));
  int group = 1;
  while (group * 2 <= n) group *= 2;
  const int rem = n - group;
  const float final_divisor = opt.average ? static_cast<float>(n) : 1.0f;

  int vrank = r - rem;  // rank within the power-of-two group, -1 when folded away
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      comm.send(buf, count, dt, r + 1, opt.tag);
      vrank = -1;
    } else {
      comm.recv(tmp, count, dt, r - 1, opt.tag);
      reduce(opt.op, buf, tmp, count, dt);
      vrank = r / 2;
    }
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < group; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      CommHandle recv = comm.irecv(tmp, count, dt, peer, opt.tag);
      CommHandle send = comm.isend(buf, count, dt, peer, opt.tag);
      recv.wait();
      send.wait();
      reduce(opt.op, buf, tmp, count, dt, (mask << 1) >= group ? final_divisor : 1.0f);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      comm.send(buf, count, dt, r - 1, opt.tag);
    } else {
      comm.recv(buf, count, dt, r + 1, opt.tag);
    }
  }
}

void check_options(const RingOptions& opt) {
  if (opt.average && opt.op != ReduceOp::sum)
    throw std::invalid_argument(std::string("allreduce: average divides a sum, not a ") +
                                reduce_op_name(opt.op));
}

}  // namespace

size_t ring_default_chunk_bytes(size_t segment_bytes, TransferPath path) {
  if (path == TransferPath::link) return size_t{128} << 10;
  constexpr size_t kChunk = size_t{512} << 10;
  return segment_bytes < 4 * kChunk ? std::max<size_t>(segment_bytes, 1) : kChunk;
}

Shard RingSchedule::piece(int segment, size_t j) const {
  const Shard seg = shard_of(count, nranks, segment);
  const size_t base = seg.count / chunks, extra = seg.count % chunks;
  return {seg.offset + j * base + std::min(j, extra), base + (j < extra ? 1 : 0)};
}

size_t ring_chunks_per_segment(size_t count, int nranks, DType dt, size_t chunk_bytes) {
  const size_t seg_bytes = shard_of(count, nranks, 0).count * dtype_size(dt);
  const size_t chunk = std::max<size_t>(chunk_bytes, 1);
  return std::max<size_t>(1, (seg_bytes + chunk - 1) / chunk);
}

void ring_allreduce(Communicator& comm, void* buf, size_t count, DType dt, const RingOptions& opt) {
  check_options(opt);
  if (comm.size() == 1 || count == 0) return;
  auto* bytes = static_cast<std::byte*>(buf);
  if (count * dtype_size(dt) <= opt.small_bytes)
    return recursive_doubling(comm, bytes, count, dt, opt);
  ring_steps(comm, bytes, count, dt, 0, 2 * (comm.size() - 1), opt);
}

void ring_reduce_scatter(Communicator& comm, void* buf, size_t count, DType dt,
                         const RingOptions& opt) {
  check_options(opt);
  ring_steps(comm, static_cast<std::byte*>(buf), count, dt, 0, comm.size() - 1, opt);
}

void ring_allgather(Communicator& comm, void* buf, size_t count, DType dt, const RingOptions& opt) {
  const int n = comm.size();
  ring_steps(comm, static_cast<std::byte*>(buf), count, dt, n - 1, 2 * (n - 1), opt);
}

void allreduce(Communicator& comm, AllreduceAlgo algo, void* buf, size_t count, DType dt,
               const RingOptions& opt) {
  if (algo == AllreduceAlgo::ring) return ring_allreduce(comm, buf, count, dt, opt);
  check_options(opt);
  comm.allreduce(buf, count, dt, opt.op);
  if (opt.average) divide_by(buf, count, dt, static_cast<float>(comm.size()));
}

}  // namespace ringstep
