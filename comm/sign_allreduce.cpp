#include "comm/sign_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ringstep {
namespace {

constexpr size_t kScaleBytes = sizeof(float);

// Where chunk j's pieces lie: every message is [fp32 scale | chunk/8 packed bytes], rounded
// up to whole 16-bit words (the transport moves 16-bit words; the pad byte is 0).
struct Layout {
  size_t count = 0;
  size_t chunk = 0;        // elements per server chunk, a multiple of 8
  size_t block_bytes = 0;  // one message

  Layout(size_t n, int nranks) : count(n), chunk(sign_chunk_elems(n, nranks)) {
    block_bytes = (kScaleBytes + chunk / 8 + 1) / 2 * 2;
  }
  // The real (unpadded) elements of chunk j.
  Shard real(int j) const {
    const size_t begin = std::min(count, size_t(j) * chunk);
    return {begin, std::min(count, begin + chunk) - begin};
  }
};

// Per-thread staging, reused so that steady-state calls never allocate.
std::vector<std::byte>& staging(int which) {
  thread_local std::vector<std::byte> bufs[2];
  return bufs[which];
}

// Writes SCALE and the sign code of Z[0, n) into BLOCK, zeroing the rest of it.
void encode_block(const float* z, size_t n, float scale, std::byte* block, size_t block_bytes) {
  std::memset(block, 0, block_bytes);
  std::memcpy(block, &scale, kScaleBytes);
  pack_signs(z, n, reinterpret_cast<uint8_t*>(block + kScaleBytes));
}

float block_scale(const std::byte* block) {
  float s;
  std::memcpy(&s, block, kScaleBytes);
  return s;
}

bool negative_bit(const std::byte* block, size_t i) {
  return (std::to_integer<unsigned>(block[kScaleBytes + i / 8]) >> (i % 8)) & 1u;
}

// Z[0, n) -= s sign(Z), i.e. the error the sign code leaves; returns ||Z - s sign Z||^2
// (the new error's squared norm) and adds ||Z||^2 to SQ_NORM.
double keep_error(float* z, size_t n, float s, double& sq_norm) {
  double sq_err = 0;
  for (size_t i = 0; i < n; ++i) {
    sq_norm += double(z[i]) * double(z[i]);
    z[i] = z[i] - (z[i] < 0 ? -s : s);
    sq_err += double(z[i]) * double(z[i]);
  }
  return sq_err;
}

// Worker stage: E = X + E (that is z), one scale for all of it, chunk j of its code into
// message j of SEND, then E = z - s sign z.
void compress_worker(const float* x, float* e, const Layout& L, int nranks, OneBitScale kind,
                     std::byte* send, SignAllreduceStats& st) {
  for (size_t i = 0; i < L.count; ++i) e[i] += x[i];
  const float s = sign_scale(e, L.count, kind);
  for (int j = 0; j < nranks; ++j) {
    const Shard c = L.real(j);
    encode_block(e + c.offset, c.count, s, send + size_t(j) * L.block_bytes, L.block_bytes);
  }
  st.worker_sq_err = keep_error(e, L.count, s, st.worker_sq_norm);
}

// Server stage for this rank's chunk C: the mean of the decoded worker messages IN[q] (in
// rank order), plus the server error E, compressed again into OUT; E keeps the new error.
void serve_chunk(const std::byte* const* in, int nranks, Shard c, float* e, OneBitScale kind,
                 std::byte* out, size_t block_bytes, std::vector<float>& acc) {
  acc.assign(c.count, 0.0f);
  for (int q = 0; q < nranks; ++q) {
    const float s = block_scale(in[q]);
    for (size_t i = 0; i < c.count; ++i) acc[i] += negative_bit(in[q], i) ? -s : s;
  }
  const float n = float(nranks);
  for (size_t i = 0; i < c.count; ++i) e[i] = acc[i] / n + e[i];
  const float s = sign_scale(e, c.count, kind);
  encode_block(e, c.count, s, out, block_bytes);
  double unused = 0;
  keep_error(e, c.count, s, unused);
}

// Posts a receive of rank j's message into IN + j * block_bytes and a send of OUT(j) to
// rank j, for every peer j, and waits for all of them. Sends start at the right-hand
// neighbour so that every link is busy at once.
template <class Out>
void exchange(Communicator& comm, Out&& out, std::byte* in, size_t block_bytes, int tag) {
  const int n = comm.size(), r = comm.rank();
  const size_t words = block_bytes / 2;
  std::vector<CommHandle> pending;
  for (int k = 1; k < n; ++k) {
    const int j = (r - k + n) % n;
    pending.push_back(comm.irecv(in + size_t(j) * block_bytes, words, DType::f16, j, tag));
  }
  for (int k = 1; k < n; ++k) {
    const int j = (r + k) % n;
    pending.push_back(comm.isend(out(j), words, DType::f16, j, tag));
  }
  for (const CommHandle& h : pending) h.wait();
}

}  // namespace

void pack_signs(const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < (n + 7) / 8; ++b) {
    unsigned byte = 0;
    const size_t end = std::min(n, b * 8 + 8);
    for (size_t i = b * 8; i < end; ++i) byte |= unsigned(x[i] < 0) << (i % 8);
    out[b] = uint8_t(byte);
  }
}

void unpack_signs(const uint8_t* in, size_t n, float scale, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = (in[i / 8] >> (i % 8)) & 1u ? -scale : scale;
}

float sign_scale(const float* z, size_t n, OneBitScale kind) {
  if (n == 0) return 0.0f;
  double sum = 0;
  if (kind == OneBitScale::mean_abs) {
    for (size_t i = 0; i < n; ++i) sum += std::fabs(double(z[i]));
    return float(sum / double(n));
  }
  for (size_t i = 0; i < n; ++i) sum += double(z[i]) * double(z[i]);
  return float(std::sqrt(sum / double(n)));
}

size_t sign_chunk_elems(size_t count, int nranks) {
  const size_t quantum = 8 * size_t(nranks);
  return (count + quantum - 1) / quantum * 8;
}

SignAllreduceStats sign_allreduce(Communicator& comm, float* x, size_t count, float* worker_error,
                                  float* server_error, OneBitScale kind, int tag) {
  SignAllreduceStats st;
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || count == 0) return st;
  const Layout L(count, n);
  const size_t all_bytes = size_t(n) * L.block_bytes;
  std::vector<std::byte>& a = staging(0);
  std::vector<std::byte>& b = staging(1);
  a.resize(2 * all_bytes);  // worker messages out, then server messages in
  b.resize(all_bytes);      // worker messages in (own one from a)
  std::byte* send = a.data();
  std::byte* gathered = a.data() + all_bytes;

  compress_worker(x, worker_error, L, n, kind, send, st);
  exchange(comm, [&](int j) { return send + size_t(j) * L.block_bytes; }, b.data(), L.block_bytes,
           tag);
  std::vector<const std::byte*> in(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) in[size_t(q)] = (q == r ? send : b.data()) + size_t(q) * L.block_bytes;

  thread_local std::vector<float> acc;
  const Shard mine = L.real(r);
  std::byte* own = gathered + size_t(r) * L.block_bytes;
  serve_chunk(in.data(), n, mine, server_error + mine.offset, kind, own, L.block_bytes, acc);
  exchange(comm, [&](int) { return static_cast<const std::byte*>(own); }, gathered, L.block_bytes,
           tag);

  for (int j = 0; j < n; ++j) {
    const Shard c = L.real(j);
    const std::byte* block = gathered + size_t(j) * L.block_bytes;
    unpack_signs(reinterpret_cast<const uint8_t*>(block + kScaleBytes), c.count,
                 block_scale(block), x + c.offset);
  }
  st.bytes_sent = 2 * size_t(n - 1) * L.block_bytes;
  return st;
}

}  // namespace ringstep
