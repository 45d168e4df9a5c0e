#include "comm/sign_allreduce.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "comm/sign_code.h"

namespace ringstep {
namespace {

// Sums run in this many independent lanes (element i in lane i mod kLanes), combined in lane
// order at the end: a fixed order, so results are reproducible, that the compiler can
// vectorise.
constexpr size_t kLanes = sign_code::kLanes;
static_assert(kScaleRun % kLanes == 0 && kScaleRun % kSignInputPiece == 0);
// The worker stage codes, and decode unpacks, in blocks cut at multiples of this many
// elements of the vector and at the server chunks' edges: a multiple of 8, so that every
// block owns whole bytes of its message, and blocks can go to different threads.
constexpr size_t kCodeBlock = 16384;
static_assert(kCodeBlock % 8 == 0);
// The least elements of a group of segments (Layout::Group): 256 KiB of floats.
constexpr size_t kGroupElems = 65536;
// Vectors shorter than this are coded on the calling thread alone (a team's start-up would
// cost more than it saves).
constexpr size_t kParallelMin = 2 * kCodeBlock;

// The sum of one run of N values VALUE(0), ..., VALUE(n - 1) (|v| or v^2 by ABS) in the order
// the header fixes (element i in double lane i mod kLanes, lanes combined in order, then
// the tail). VALUE is called once per element, in increasing order, so it may also write
// (the worker stage forms z with it).
template <class Value>
double run_sum(size_t n, bool abs, Value&& value) {
  double lane[kLanes] = {};
  size_t i = 0;
#if defined(__AVX2__)
  // The same lanes, four doubles to a register (lane k in register k / 4).
  static_assert(kLanes == 16);
  const __m256d sign = _mm256_set1_pd(-0.0);
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  for (; i + kLanes <= n; i += kLanes) {
    alignas(32) float v[kLanes];
    for (size_t k = 0; k < kLanes; ++k) v[k] = value(i + k);
    for (int q = 0; q < 4; ++q) {
      const __m256d d = _mm256_cvtps_pd(_mm_load_ps(v + 4 * q));
      acc[q] = _mm256_add_pd(acc[q], abs ? _mm256_andnot_pd(sign, d) : _mm256_mul_pd(d, d));
    }
  }
  for (int q = 0; q < 4; ++q) _mm256_storeu_pd(lane + 4 * q, acc[q]);
#else
  for (; i + kLanes <= n; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) {
      const double v = value(i + k);
      lane[k] += abs ? std::fabs(v) : v * v;
    }
#endif
  double sum = 0;
  for (double l : lane) sum += l;
  for (; i < n; ++i) {
    const double v = value(i);
    sum += abs ? std::fabs(v) : v * v;
  }
  return sum;
}

// The scale of VALUE(0), ..., VALUE(n - 1): runs of kScaleRun summed in order.
template <class Value>
float scale_of(size_t n, OneBitScale kind, Value&& value) {
  double sum = 0;
  for (size_t r = 0; r < n; r += kScaleRun)
    sum += run_sum(std::min(kScaleRun, n - r), kind == OneBitScale::mean_abs,
                   [&](size_t i) { return value(r + i); });
  return sign_code::scale_from_sum(sum, n, kind == OneBitScale::mean_abs);
}

// The message format (SignLayout) and how the CPU shares its work: groups of segments and
// code blocks.
struct Layout : SignLayout {
  struct CodeBlock {
    int chunk;
    size_t begin, end;
  };
  // Consecutive segments coded together: at least kGroupElems elements (or the rest), so that
  // a group's z is summed and coded while it is in cache, and a team shares its work.
  struct Group {
    size_t segment_begin, segment_end;
    size_t begin, end;  // elements
    size_t block_begin, block_end;
  };
  std::vector<Group> groups;
  // [0, count) cut at the groups' and chunks' edges and at multiples of kCodeBlock: inside a
  // group, every block owns whole bytes of its message.
  std::vector<CodeBlock> code_blocks;

  Layout(size_t n, const std::vector<size_t>& segment_ends, int ranks)
      : SignLayout(n, segment_ends, ranks) {
    for (size_t k = 0; k < ends.size(); ++k) {
      const size_t begin = k == 0 ? 0 : ends[k - 1];
      if (groups.empty() || groups.back().end - groups.back().begin >= kGroupElems)
        groups.push_back({k, k, begin, begin, 0, 0});
      Group& g = groups.back();
      g.segment_end = k + 1;
      g.end = ends[k];
    }
    for (Group& g : groups) {
      g.block_begin = code_blocks.size();
      for (size_t b = g.begin; b < g.end;) {
        const int j = int(b / chunk);
        const size_t e =
            std::min({g.end, size_t(j + 1) * chunk, (b / kCodeBlock + 1) * kCodeBlock});
        code_blocks.push_back({j, b, e});
        b = e;
      }
      g.block_end = code_blocks.size();
    }
  }
};

using sign_code::packed_bit;
using sign_code::signed_scale;

float scale_at(const std::byte* block, size_t offset) {
  return sign_code::load_scale(reinterpret_cast<const uint8_t*>(block) + offset);
}

// OUT[i] += (kAdd) or = the code's value +-S, for elements [b, e) of the packed BITS.
// Whole bytes go eight at a time.
template <bool kAdd>
void apply_code(const uint8_t* bits, size_t b, size_t e, float s, float* out) {
  auto put = [&](size_t i, unsigned bit) {
    out[i] = kAdd ? sign_code::add_code(out[i], s, bit) : signed_scale(s, bit);
  };
  size_t i = b;
  for (; i < e && i % 8 != 0; ++i) put(i, packed_bit(bits, i));
  for (; i + 8 <= e; i += 8) {
    const unsigned byte = bits[i / 8];
    for (unsigned k = 0; k < 8; ++k) put(i + k, (byte >> k) & 1u);
  }
  for (; i < e; ++i) put(i, packed_bit(bits, i));
}

// Z[0, n) -= s sign(Z), the error the sign code leaves, and sign(Z) into the packed BITS
// from bit FIRST on (element i is bit FIRST + i; the bytes start zeroed and are ORed into);
// adds ||Z||^2 to SQ_NORM and the new error's squared norm to SQ_ERR (statistics: summed in
// 8 float lanes). Whole bytes go eight elements at a time.
void code_and_keep_error(float* z, size_t n, float s, uint8_t* bits, size_t first, double& sq_norm,
                         double& sq_err) {
  float norm[8] = {}, err[8] = {};
  auto one = [&](size_t i, unsigned lane) {
    const float v = z[i];
    const unsigned neg = sign_code::negative(v);
    const float e = sign_code::error_after(v, s);
    norm[lane] += v * v;
    err[lane] += e * e;
    z[i] = e;
    return neg;
  };
  size_t i = 0;
  for (; i < n && (first + i) % 8 != 0; ++i)
    bits[(first + i) / 8] |= uint8_t(one(i, 0) << ((first + i) % 8));
#if defined(__AVX2__)
  // The same arithmetic, eight lanes to a register: the sign bit of s flipped where z < 0.
  const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f), sv = _mm256_set1_ps(s);
  __m256 vnorm = _mm256_setzero_ps(), verr = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(z + i);
    const __m256 neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
    const __m256 e = _mm256_sub_ps(v, _mm256_xor_ps(sv, _mm256_and_ps(neg, sign)));
    vnorm = _mm256_add_ps(vnorm, _mm256_mul_ps(v, v));
    verr = _mm256_add_ps(verr, _mm256_mul_ps(e, e));
    _mm256_storeu_ps(z + i, e);
    bits[(first + i) / 8] = uint8_t(_mm256_movemask_ps(neg));
  }
  float vn[8], ve[8];
  _mm256_storeu_ps(vn, vnorm);
  _mm256_storeu_ps(ve, verr);
  for (unsigned k = 0; k < 8; ++k) {
    norm[k] += vn[k];
    err[k] += ve[k];
  }
#endif
  for (; i + 8 <= n; i += 8) {
    unsigned byte = 0;
    for (unsigned k = 0; k < 8; ++k) byte |= one(i + k, k) << k;
    bits[(first + i) / 8] = uint8_t(byte);
  }
  for (; i < n; ++i) bits[(first + i) / 8] |= uint8_t(one(i, 0) << ((first + i) % 8));
  for (unsigned k = 0; k < 8; ++k) {
    sq_norm += norm[k];
    sq_err += err[k];
  }
}

// Whether to open a team for L's vector: long enough, and threads to share it.
bool in_parallel(const Layout& L) { return L.count >= kParallelMin && omp_get_max_threads() > 1; }

// What the worker stage keeps between its passes (sized by the layout, reused).
struct WorkerScratch {
  std::vector<double> run_sums;         // per scale run
  std::vector<float> scales;            // per segment
  std::vector<double> sq_norm, sq_err;  // per code block

  explicit WorkerScratch(const Layout& L)
      : run_sums(L.runs.size()),
        scales(L.ends.size()),
        sq_norm(L.code_blocks.size()),
        sq_err(L.code_blocks.size()) {}
};

// Worker stage, group of segments by group (Layout::Group), in three passes each split over
// the calling thread's OpenMP team (its threads get whole runs, segments and code blocks, so
// the bits do not depend on how many there are): E = input + E (that is z) formed run by
// run by ADD (kSignInputPiece elements at a time, each summed for its run while it is in
// cache); each segment's scale from its runs' sums, into the messages of the chunks it
// touches; then, block by block, E = z - s sign z with the code into message j of SEND.
template <class Add>
void compress_worker(Add&& add, float* e, const Layout& L, int nranks, OneBitScale kind,
                     std::byte* send, WorkerScratch& w, SignAllreduceStats& st) {
  const bool abs = kind == OneBitScale::mean_abs;
#pragma omp parallel if (in_parallel(L))
  {
#pragma omp for schedule(static) nowait
    for (int j = 0; j < nranks; ++j)
      std::memset(send + size_t(j) * L.block_bytes, 0, L.block_bytes);
    for (const Layout::Group& g : L.groups) {
      const auto runs_end = std::ptrdiff_t(L.segment_runs[g.segment_end]);
#pragma omp for schedule(static)
      for (auto r = std::ptrdiff_t(L.segment_runs[g.segment_begin]); r < runs_end; ++r) {
        const Layout::Run& run = L.runs[size_t(r)];
        float* z = e + run.begin;
        const size_t n = run.end - run.begin;
        size_t formed = 0;  // z[0, formed) holds z
        w.run_sums[size_t(r)] = run_sum(n, abs, [&](size_t i) {
          if (i == formed) {
            formed = std::min(n, i + kSignInputPiece);
            add(run.begin + i, run.begin + formed, z + i);
          }
          return z[i];
        });
      }
#pragma omp for schedule(static)
      for (auto k = std::ptrdiff_t(g.segment_begin); k < std::ptrdiff_t(g.segment_end); ++k) {
        double sum = 0;
        for (size_t r = L.segment_runs[size_t(k)]; r < L.segment_runs[size_t(k) + 1]; ++r)
          sum += w.run_sums[r];
        const size_t start = k == 0 ? 0 : L.ends[size_t(k) - 1], end = L.ends[size_t(k)];
        const float scale = sign_code::scale_from_sum(sum, end - start, abs);
        w.scales[size_t(k)] = scale;
        for (int j = end > start ? int(start / L.chunk) : nranks;
             j < nranks && size_t(j) * L.chunk < end; ++j) {
          const Shard c = L.real(j);
          if (std::max(start, c.offset) < std::min(end, c.offset + c.count))
            sign_code::store_scale(reinterpret_cast<uint8_t*>(send) + size_t(j) * L.block_bytes +
                                       L.scale_offset(j, size_t(k)),
                                   scale);
        }
      }
      // nowait: the next group's passes touch other elements, and its blocks come after two
      // more barriers (a byte shared with this group's last block is written in turn).
#pragma omp for schedule(static) nowait
      for (auto q = std::ptrdiff_t(g.block_begin); q < std::ptrdiff_t(g.block_end); ++q) {
        const Layout::CodeBlock& cb = L.code_blocks[size_t(q)];
        const size_t chunk_begin = size_t(cb.chunk) * L.chunk;
        auto* bits =
            reinterpret_cast<uint8_t*>(send + size_t(cb.chunk) * L.block_bytes + L.scale_bytes);
        double norm = 0, err = 0;
        L.for_parts(cb.begin, cb.end, [&](size_t k, size_t lo, size_t hi) {
          code_and_keep_error(e + lo, hi - lo, w.scales[k], bits, lo - chunk_begin, norm, err);
        });
        w.sq_norm[size_t(q)] = norm;
        w.sq_err[size_t(q)] = err;
      }
    }
  }
  for (size_t q = 0; q < L.code_blocks.size(); ++q) {
    st.worker_sq_norm += w.sq_norm[q];
    st.worker_sq_err += w.sq_err[q];
  }
}

// Server stage for this rank's chunk J: the mean of the decoded worker messages IN[q] (in
// rank order), plus the server error E (at J's offset), compressed again into OUT; E keeps
// the new error.
void serve_chunk(const std::byte* const* in, int nranks, const Layout& L, int j, float* e,
                 OneBitScale kind, std::byte* out, std::vector<float>& acc) {
  const Shard c = L.real(j);
  acc.assign(c.count, 0.0f);
  for (int q = 0; q < nranks; ++q) {
    const auto* bits = reinterpret_cast<const uint8_t*>(in[q] + L.scale_bytes);
    L.for_parts(c.offset, c.offset + c.count, [&](size_t k, size_t b, size_t end) {
      apply_code<true>(bits, b - c.offset, end - c.offset, scale_at(in[q], L.scale_offset(j, k)),
                       acc.data());
    });
  }
  const float n = float(nranks);
  for (size_t i = 0; i < c.count; ++i)
    e[c.offset + i] = sign_code::server_z(acc[i], n, e[c.offset + i]);
  std::memset(out, 0, L.block_bytes);
  auto* bits = reinterpret_cast<uint8_t*>(out + L.scale_bytes);
  double unused_norm = 0, unused_err = 0;
  L.for_parts(c.offset, c.offset + c.count, [&](size_t k, size_t b, size_t end) {
    const float s = sign_scale(e + b, end - b, kind);
    sign_code::store_scale(reinterpret_cast<uint8_t*>(out) + L.scale_offset(j, k), s);
    code_and_keep_error(e + b, end - b, s, bits, b - c.offset, unused_norm, unused_err);
  });
}

// X's elements of code block CB from its server's message BLOCK.
void decode_block(const std::byte* block, const Layout& L, const Layout::CodeBlock& cb, float* x) {
  const size_t chunk_begin = size_t(cb.chunk) * L.chunk;
  const auto* bits = reinterpret_cast<const uint8_t*>(block + L.scale_bytes);
  L.for_parts(cb.begin, cb.end, [&](size_t k, size_t b, size_t end) {
    apply_code<false>(bits, b - chunk_begin, end - chunk_begin,
                      scale_at(block, L.scale_offset(cb.chunk, k)), x + chunk_begin);
  });
}

// Posts a receive of rank j's message into IN + j * block_bytes and a send of OUT(j) to
// rank j, for every peer j, and waits for all of them. Sends start at the right-hand
// neighbour so that every link is busy at once.
template <class Out>
void exchange_blocks(Communicator& comm, Out&& out, std::byte* in, size_t block_bytes, int tag) {
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
  size_t b = 0;
  for (; b < n / 8; ++b) {
    unsigned byte = 0;
    for (unsigned k = 0; k < 8; ++k) byte |= unsigned(x[b * 8 + k] < 0) << k;
    out[b] = uint8_t(byte);
  }
  if (n % 8 != 0) {
    unsigned byte = 0;
    for (size_t i = b * 8; i < n; ++i) byte |= unsigned(x[i] < 0) << (i % 8);
    out[b] = uint8_t(byte);
  }
}

void unpack_signs(const uint8_t* in, size_t n, float scale, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = signed_scale(scale, packed_bit(in, i));
}

float sign_scale(const float* z, size_t n, OneBitScale kind) {
  return scale_of(n, kind, [z](size_t i) { return z[i]; });
}

size_t sign_allreduce_bytes(size_t count, const std::vector<size_t>& segment_ends, int nranks) {
  if (nranks <= 1 || count == 0) return 0;
  return 2 * size_t(nranks - 1) * Layout(count, segment_ends, nranks).block_bytes;
}

std::vector<size_t> split_segments(const std::vector<size_t>& segment_ends, size_t count,
                                   size_t block) {
  std::vector<size_t> out;
  size_t start = 0;
  for (size_t end : segment_ends.empty() ? std::vector<size_t>{count} : segment_ends) {
    if (block > 0)
      for (size_t cut = start + block; cut < end; cut += block) out.push_back(cut);
    out.push_back(end);
    start = end;
  }
  return out;
}

struct SignAllreduce::Impl {
  Layout layout;
  OneBitScale kind;
  int nranks, rank;
  std::vector<std::byte> send;      // the worker messages, one per server chunk
  std::vector<std::byte> received;  // the other workers' messages for this rank's chunk
  std::vector<std::byte> gathered;  // every server's message (this rank's own included)
  std::vector<float> acc;           // the server stage's sum
  WorkerScratch worker;

  Impl(size_t count, const std::vector<size_t>& ends, int n, int r, OneBitScale k)
      : layout(count, ends, n),
        kind(k),
        nranks(n),
        rank(r),
        send(size_t(n) * layout.block_bytes),
        received(send.size()),
        gathered(send.size()),
        worker(layout) {}
  std::byte* block(std::vector<std::byte>& v, int j) {
    return v.data() + size_t(j) * layout.block_bytes;
  }
};

SignAllreduce::SignAllreduce(size_t count, const std::vector<size_t>& segment_ends, int nranks,
                             int rank, OneBitScale kind)
    : impl_(std::make_unique<Impl>(count, segment_ends, nranks, rank, kind)) {}
SignAllreduce::~SignAllreduce() = default;
SignAllreduce::SignAllreduce(SignAllreduce&&) noexcept = default;
SignAllreduce& SignAllreduce::operator=(SignAllreduce&&) noexcept = default;

SignAllreduceStats SignAllreduce::encode(const float* x, float* worker_error) {
  return encode_input(
      [x](size_t b, size_t e, float* z) {
        for (size_t i = b; i < e; ++i) z[i - b] += x[i];
      },
      worker_error);
}

SignAllreduceStats SignAllreduce::encode(const SignInput& input, float* worker_error) {
  return encode_input(input, worker_error);
}

template <class Add>
SignAllreduceStats SignAllreduce::encode_input(Add&& add, float* worker_error) {
  Impl& m = *impl_;
  SignAllreduceStats st;
  compress_worker(add, worker_error, m.layout, m.nranks, m.kind, m.send.data(), m.worker, st);
  st.bytes_sent = 2 * size_t(m.nranks - 1) * m.layout.block_bytes;
  return st;
}

void SignAllreduce::exchange(Communicator& comm, float* server_error, int tag) {
  Impl& m = *impl_;
  const int n = m.nranks, r = m.rank;
  const size_t bytes = m.layout.block_bytes;
  exchange_blocks(
      comm, [&](int j) { return m.block(m.send, j); }, m.received.data(), bytes, tag);
  std::vector<const std::byte*> in(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) in[size_t(q)] = m.block(q == r ? m.send : m.received, q);
  std::byte* own = m.block(m.gathered, r);
  serve_chunk(in.data(), n, m.layout, r, server_error, m.kind, own, m.acc);
  exchange_blocks(
      comm, [&](int) { return static_cast<const std::byte*>(own); }, m.gathered.data(), bytes, tag);
}

void SignAllreduce::serve_alone(float* server_error) {
  Impl& m = *impl_;
  std::vector<const std::byte*> in(static_cast<size_t>(m.nranks), m.block(m.send, m.rank));
  serve_chunk(in.data(), m.nranks, m.layout, m.rank, server_error, m.kind,
              m.block(m.gathered, m.rank), m.acc);
}

void SignAllreduce::decode(float* x) const {
  Impl& m = *impl_;
  const Layout& L = m.layout;
  const auto blocks = std::ptrdiff_t(L.code_blocks.size());
#pragma omp parallel for schedule(static) if (in_parallel(L))
  for (std::ptrdiff_t q = 0; q < blocks; ++q) {
    const Layout::CodeBlock& cb = L.code_blocks[size_t(q)];
    decode_block(m.block(m.gathered, cb.chunk), L, cb, x);
  }
}

SignAllreduceStats sign_allreduce(Communicator& comm, float* x, size_t count,
                                  const std::vector<size_t>& segment_ends, float* worker_error,
                                  float* server_error, OneBitScale kind, int tag) {
  const int n = comm.size();
  if (n == 1 || count == 0) return {};
  SignAllreduce call(count, segment_ends, n, comm.rank(), kind);
  const SignAllreduceStats st = call.encode(x, worker_error);
  call.exchange(comm, server_error, tag);
  call.decode(x);
  return st;
}

}  // namespace ringstep
