// The kernels' loops written out sequentially: a thread block becomes one iteration of the
// outer loops, its tiles the inner ones; what the kernel's threads share in registers or
// shared memory (the running max and sum, the accumulators) is a local array here.
#include "core/cuda/flash_twin.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda/attention_layout.h"
#include "core/cuda/flash_tiling.h"

namespace ringstep::cuda {
namespace {

using namespace flash;

// X as storage DT holds it.
float stored(DType dt, float x) {
  if (dt != DType::f32) round_to_dtype(dt, &x, &x, 1);
  return x;
}

// Whether KERNEL's product operands (P, dO, dS) round to the storage DT: the tensor-core
// kernel's do (it takes bf16 and fp16), the SIMT kernel's do not.
bool rounds_operands(const char* fn, FlashKernel kernel, DType dt) {
  if (kernel == FlashKernel::simt) return false;
  if (dt == DType::f32)
    throw std::invalid_argument(std::string(fn) +
                                ": tensor_core takes bf16 or fp16 storage, not fp32");
  return true;
}

// Dot product of two head rows, summed in element order as each kernel thread does.
float dot(const float* a, const float* b, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace

void flash_forward_twin(DType dt, FlashKernel kernel, float* out, float* lse, const float* qkv,
                        int B, int T, int C, int NH, std::vector<FlashTile>* visited) {
  const int hs = head_size("flash_forward_twin", C, NH);
  const bool round_p = rounds_operands("flash_forward_twin", kernel, dt);
  const float scale = 1.0f / std::sqrt(float(hs));
  std::vector<float> m(kBlockQ), l(kBlockQ), acc(size_t(kBlockQ) * hs), s(kBlockK);
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    auto row = [&](int part, int t) { return qkv + qkv_index(b, t, part, h, 0, T, C, hs); };
    for (int qb = 0; qb < num_blocks(T, kBlockQ); ++qb) {  // one thread block
      const int q0 = qb * kBlockQ;
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int kb = 0; kb < key_block_end(qb, T); ++kb) {
        if (visited) visited->push_back({bh, qb, kb});
        const int k0 = kb * kBlockK;
        for (int r = 0; r < kBlockQ; ++r) {
          const int q = q0 + r;
          float block_max = -INFINITY;
          for (int c = 0; c < kBlockK; ++c) {
            const int k = k0 + c;
            s[c] = visible(q, k, T) ? dot(row(0, q), row(1, k), hs) * scale : -INFINITY;
            block_max = std::fmax(block_max, s[c]);
          }
          const float m_new = std::fmax(m[r], block_max);
          const float alpha = rescale_factor(m[r], m_new);
          float* a = &acc[size_t(r) * hs];
          float sum = 0.0f;
          for (int d = 0; d < hs; ++d) a[d] *= alpha;
          for (int c = 0; c < kBlockK; ++c) {
            const float p = block_prob(s[c], m_new), pv = round_p ? stored(dt, p) : p;
            sum += p;
            if (p == 0.0f) continue;  // masked, its key perhaps past T (the kernel's zero rows)
            const float* v = row(2, k0 + c);
            for (int d = 0; d < hs; ++d) a[d] += pv * v[d];
          }
          l[r] = alpha * l[r] + sum;
          m[r] = m_new;
        }
      }
      for (int r = 0; r < kBlockQ && q0 + r < T; ++r) {
        const int q = q0 + r;
        for (int d = 0; d < hs; ++d)
          out[btc_index(b, q, h, d, T, C, hs)] = stored(dt, acc[size_t(r) * hs + d] / l[r]);
        lse[row_index(bh, q, T)] = row_lse(m[r], l[r]);
      }
    }
  }
}

void flash_backward_twin(DType dt, FlashKernel kernel, float* dqkv, const float* dout_in,
                         const float* qkv, const float* out, const float* lse, int B, int T, int C,
                         int NH, std::vector<FlashTile>* visited) {
  const int hs = head_size("flash_backward_twin", C, NH);
  const float scale = 1.0f / std::sqrt(float(hs));
  const bool round = rounds_operands("flash_backward_twin", kernel, dt);
  // The tensor-core kernel reads dO as DT, for D and both of its products.
  std::vector<float> dout_rounded;
  if (round) {
    dout_rounded.assign(dout_in, dout_in + size_t(B) * T * C);
    round_to_dtype(dt, dout_rounded.data(), dout_rounded.data(), dout_rounded.size());
  }
  const float* dout = round ? dout_rounded.data() : dout_in;
  // The preprocessing kernel: D = rowsum(dO o O) per (head, query row).
  std::vector<float> D(size_t(B) * NH * T);
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      const size_t at = btc_index(bh / NH, t, bh % NH, 0, T, C, hs);
      D[row_index(bh, t, T)] = dot(dout + at, out + at, hs);
    }
  std::vector<float> dk(size_t(kBlockK) * hs), dv(size_t(kBlockK) * hs), ds(kBlockK), dq(hs);
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    auto row = [&](int part, int t) { return qkv + qkv_index(b, t, part, h, 0, T, C, hs); };
    auto drow = [&](int part, int t) { return dqkv + qkv_index(b, t, part, h, 0, T, C, hs); };
    for (int kb = 0; kb < num_blocks(T, kBlockK); ++kb) {  // one thread block
      const int k0 = kb * kBlockK;
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int qb = query_block_begin(kb); qb < num_blocks(T, kBlockQ); ++qb) {
        if (visited) visited->push_back({bh, qb, kb});
        const int q0 = qb * kBlockQ;
        for (int r = 0; r < kBlockQ; ++r) {
          const int q = q0 + r;
          if (q >= T) break;  // padding rows: P = 0, nothing to add
          const float* g = dout + btc_index(b, q, h, 0, T, C, hs);
          for (int c = 0; c < kBlockK; ++c) {
            const int k = k0 + c;
            if (!visible(q, k, T)) {
              ds[c] = 0.0f;
              continue;
            }
            const float p =
                recomputed_prob(dot(row(0, q), row(1, k), hs) * scale, lse[row_index(bh, q, T)]);
            ds[c] = score_grad(p, dot(g, row(2, k), hs), D[row_index(bh, q, T)]);
            const float pv = round ? stored(dt, p) : p;
            if (round) ds[c] = stored(dt, ds[c]);  // the operand of dK and dQ
            for (int d = 0; d < hs; ++d) dv[size_t(c) * hs + d] += pv * g[d];
            for (int d = 0; d < hs; ++d) dk[size_t(c) * hs + d] += ds[c] * row(0, q)[d];
          }
          // This tile's share of dQ, added to dqkv once per tile (the kernel's atomics).
          std::fill(dq.begin(), dq.end(), 0.0f);
          for (int c = 0; c < kBlockK && k0 + c < T; ++c)
            for (int d = 0; d < hs; ++d) dq[d] += ds[c] * row(1, k0 + c)[d];
          for (int d = 0; d < hs; ++d) drow(0, q)[d] += scale * dq[d];
        }
      }
      for (int c = 0; c < kBlockK && k0 + c < T; ++c)
        for (int d = 0; d < hs; ++d) {
          drow(1, k0 + c)[d] += scale * dk[size_t(c) * hs + d];
          drow(2, k0 + c)[d] += dv[size_t(c) * hs + d];
        }
    }
  }
}

}  // namespace ringstep::cuda
