#include "comm/sign_twins.h"

#include <algorithm>
#include <cstring>

#include "comm/sign_code.h"

namespace ringstep {

namespace sc = sign_code;

void HostSignKernels::zero(void* p, size_t bytes, StreamHandle) { std::memset(p, 0, bytes); }

void HostSignKernels::add_error(const float* x, float* e, size_t n, StreamHandle) {
  for (size_t i = 0; i < n; ++i) e[i] = x[i] + e[i];
}

// run_sums_kernel: one 16-lane group per run; then scales_kernel: one thread per part.
void HostSignKernels::scales(const float* z, const SignRuns& r, bool mean_abs, double* run_sums,
                             float* scales, StreamHandle) {
  for (size_t q = 0; q < r.nruns; ++q) {
    const float* run = z + r.runs[2 * q];
    const size_t len = r.runs[2 * q + 1] - r.runs[2 * q];
    double lanes[sc::kLanes];
    for (int l = 0; l < sc::kLanes; ++l) lanes[l] = sc::lane_sum(run, len, mean_abs, l);
    run_sums[q] = sc::combine_run(lanes, run, len, mean_abs);
  }
  for (size_t p = 0; p < r.parts; ++p) scales[p] = sc::part_scale(run_sums, r, p, mean_abs);
}

void HostSignKernels::place_scales(const float* scales, const size_t* placements, size_t n,
                                   uint8_t* msgs, StreamHandle) {
  for (size_t i = 0; i < n; ++i)
    sc::store_scale(msgs + placements[2 * i + 1], scales[placements[2 * i]]);
}

// code_kernel: per chunk, warps of 32 elements from its first (lanes past the chunk or the
// count hold +0, whose bit is 0); the ballot's bytes go to the chunk's message, the new
// error to every real element.
void HostSignKernels::code(float* z, const SignTables& t, int j0, int j1, const float* scales,
                           size_t segment_base, uint8_t* msgs, StreamHandle) {
  const size_t chunk_bytes = t.chunk / 8;
  for (int j = j0; j < j1; ++j) {
    uint8_t* bits = msgs + size_t(j) * t.block_bytes + t.scale_bytes;
    for (size_t w = 0; w * 32 < t.chunk; ++w) {
      uint32_t word = 0;
      for (int lane = 0; lane < 32; ++lane) {
        const size_t local = w * 32 + size_t(lane), i = size_t(j) * t.chunk + local;
        const bool real = local < t.chunk && i < t.count;
        word |= uint32_t(sc::negative(real ? z[i] : 0.0f)) << lane;
      }
      for (int b = 0; b < 4; ++b)
        if (w * 4 + size_t(b) < chunk_bytes) bits[w * 4 + size_t(b)] = sc::ballot_byte(word, b);
      for (int lane = 0; lane < 32; ++lane) {
        const size_t local = w * 32 + size_t(lane), i = size_t(j) * t.chunk + local;
        if (local >= t.chunk || i >= t.count) continue;
        const size_t k = sc::segment_of(t.ends, t.segments, i);
        z[i] = sc::error_after(z[i], scales[k - segment_base]);
      }
    }
  }
}

void HostSignKernels::server_sum(const uint8_t* in, const uint8_t* own, const SignTables& t, int r,
                                 float* e, StreamHandle) {
  const size_t begin = std::min(t.count, size_t(r) * t.chunk);
  const size_t end = std::min(t.count, begin + t.chunk);
  for (size_t i = begin; i < end; ++i) e[i] = sc::server_element(in, own, t, r, i, e[i]);
}

void HostSignKernels::decode(const uint8_t* gathered, const SignTables& t, float* x, StreamHandle) {
  for (size_t i = 0; i < t.count; ++i) x[i] = sc::decode_element(gathered, t, i);
}

}  // namespace ringstep
