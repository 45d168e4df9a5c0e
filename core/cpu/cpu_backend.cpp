#include "core/cpu/cpu_backend.h"

#include <algorithm>
#include <limits>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "core/cpu/attention16.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"
#include "core/cpu/team.h"

namespace ringstep::cpu {
namespace {

float* f32(void* act) { return static_cast<float*>(act); }
const float* f32(const void* act) { return static_cast<const float*>(act); }
uint16_t* u16(void* act) { return static_cast<uint16_t*>(act); }
const uint16_t* u16(const void* act) { return static_cast<const uint16_t*>(act); }

// 16-bit <-> fp32 conversions of a span, split into chunks across the thread pool when the
// span is long. Each element rounds on its own, so the bits do not depend on the threads.
constexpr size_t kConvertChunk = 8192;

template <typename Convert>
void for_convert_chunks(size_t n, Convert&& convert) {
  const std::ptrdiff_t chunks = std::ptrdiff_t((n + kConvertChunk - 1) / kConvertChunk);
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kConvertChunk;
    convert(begin, std::min(kConvertChunk, n - begin));
  }
}

void widen(DType dt, const uint16_t* in, float* out, size_t n) {
  for_convert_chunks(n, [&](size_t b, size_t len) { widen_to_fp32(dt, in + b, out + b, len); });
}

void narrow(DType dt, const float* in, uint16_t* out, size_t n) {
  for_convert_chunks(n, [&](size_t b, size_t len) { narrow_from_fp32(dt, in + b, out + b, len); });
}

// Element I of a 16-bit stored tensor.
void* elem16(void* act, size_t i) { return u16(act) + i; }
const void* elem16(const void* act, size_t i) { return u16(act) + i; }

// Calls FN(r0, rows) on consecutive blocks of at most BLOCK rows of [0, N), in order; what
// FN allocates from ARENA is released after each block.
template <typename Fn>
void for_row_blocks(Arena& arena, int N, int block, Fn&& fn) {
  for (int r0 = 0; r0 < N; r0 += block) {
    ArenaScope scope(arena);
    fn(r0, std::min(block, N - r0));
  }
}

// A row block's work in one parallel region (when it holds at least kParallelMinValues
// values): FN(i0, count) runs once per thread on that thread's rows [i0, i0 + count) of
// ROWS, a static split; outside a region it runs once on all of them. The ops FN calls
// open no region of their own (nested regions are inactive: threads.h), so a thread
// widens, computes and rounds its own rows in its own cache, with one fork/join per block.
constexpr size_t kParallelMinValues = size_t{1} << 15;

template <typename Fn>
void for_thread_rows(int rows, int C, Fn&& fn) {
#pragma omp parallel if (size_t(rows) * C >= kParallelMinValues)
  {
    const Span share = team_share(size_t(rows));
    if (share.size() > 0) fn(int(share.begin), int(share.size()));
  }
}

// N fp32 values rounded to DT in arena scratch, held the way gemm16 reads them: in fp32
// where gemm16 widens (so no product widens them again), else as 16-bit bits.
class RoundedScratch {
 public:
  RoundedScratch(DType dt, Arena& arena, size_t n) : dt_(dt) {
    if (gemm16_widens(dt))
      wide_ = arena.alloc_floats(n);
    else
      bits_ = static_cast<uint16_t*>(arena.alloc_bytes(n * sizeof(uint16_t)));
  }
  // Values [begin, begin + n) from X.
  void fill(const float* x, size_t begin, size_t n) const {
    if (bits_ != nullptr)
      narrow_from_fp32(dt_, x + begin, bits_ + begin, n);
    else
      round_to_dtype(dt_, x + begin, wide_ + begin, n);
  }
  Operand16 operand(int ld) const {
    return bits_ != nullptr ? Operand16{bits_, ld} : Operand16{nullptr, 0, wide_, ld};
  }

 private:
  DType dt_;
  float* wide_ = nullptr;
  uint16_t* bits_ = nullptr;
};

// A row-wise op on 16-bit storage: for each block of kRowBlock rows of INP (N, C), each
// thread widens its rows of the block to x, calls FN(y, x, r, rows) for the fp32 result y
// of rows [r, r + rows) of the whole tensor, and rounds y into OUT.
template <typename Fn>
void rows_in_fp32(DType dt, Arena& arena, void* out, const void* inp, int N, int C, Fn&& fn) {
  for_row_blocks(arena, N, CpuBackend::kRowBlock, [&](int r0, int rows) {
    const size_t n = size_t(rows) * C;
    float* x = arena.alloc_floats(n);
    float* y = arena.alloc_floats(n);
    if (arena.counting()) return;
    for_thread_rows(rows, C, [&](int i0, int count) {
      const size_t at = size_t(i0) * C, len = size_t(count) * C, src = size_t(r0) * C + at;
      widen_to_fp32(dt, u16(elem16(inp, src)), x + at, len);
      fn(y + at, x + at, r0 + i0, count);
      narrow_from_fp32(dt, y + at, u16(elem16(out, src)), len);
    });
  });
}

}  // namespace

CpuBackend::CpuBackend(DType act_dtype) : dt_(act_dtype) {}

void CpuBackend::set_weights(const float* params, size_t n) {
  params_ = params;
  params_n_ = n;
  if (!half()) return;  // the fp32 path reads the weights where they are
  weights16_.resize(n);
  narrow(dt_, params, weights16_.data(), n);
  if (!gemm16_widens(dt_)) {
    weights32_.clear();  // never a stale copy should the kernel change
    return;
  }
  weights32_.resize(n);
  widen(dt_, weights16_.data(), weights32_.data(), n);
}

size_t CpuBackend::weight_copy_bytes(size_t n) const {
  if (!half()) return 0;
  return n * (sizeof(uint16_t) + (gemm16_widens(dt_) ? sizeof(float) : 0));
}

const uint16_t* CpuBackend::w16(const float* w) const {
  const std::less<const float*> before;
  if (params_ == nullptr || before(w, params_) || !before(w, params_ + params_n_))
    throw std::logic_error("CpuBackend: a weight outside the buffer given to set_weights");
  return weights16_.data() + (w - params_);
}

Operand16 CpuBackend::weight_operand(const float* w, int ld) const {
  const uint16_t* bits = w16(w);
  const float* wide = weights32_.empty() ? nullptr : weights32_.data() + (bits - weights16_.data());
  return {bits, ld, wide, ld};
}

void CpuBackend::zero(float* x, size_t n, Arena& arena) {
  if (!arena.counting()) std::memset(x, 0, n * sizeof(float));
}

void CpuBackend::encoder_forward(void* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int B, int T, int C, Arena& arena) {
  const size_t n = size_t(B) * T * C;
  ArenaScope scope(arena);
  float* y = half() ? arena.alloc_floats(n) : f32(out);
  if (arena.counting()) return;
  cpu::encoder_forward(y, tokens, wte, wpe, B, T, C);
  if (half()) narrow(dt_, y, u16(out), n);
}

void CpuBackend::encoder_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int B, int T, int C, Arena& arena) {
  if (!arena.counting()) cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
}

void CpuBackend::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                   const float* weight, const float* bias, int N, int C,
                                   Arena& arena) {
  if (!half()) {
    if (!arena.counting())
      cpu::layernorm_forward(f32(out), mean, rstd, f32(inp), weight, bias, N, C);
    return;
  }
  rows_in_fp32(dt_, arena, out, inp, N, C, [&](float* y, const float* x, int r0, int rows) {
    cpu::layernorm_forward(y, mean + r0, rstd + r0, x, weight, bias, rows, C);
  });
}

void CpuBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const void* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C, Arena& arena) {
  if (!half()) {
    if (!arena.counting())
      cpu::layernorm_backward(dinp, dweight, dbias, dout, f32(inp), weight, mean, rstd, N, C);
    return;
  }
  // Row blocks in order: dweight and dbias add the rows in the same order as one call.
  for_row_blocks(arena, N, kRowBlock, [&](int r0, int rows) {
    const size_t at = size_t(r0) * C, n = size_t(rows) * C;
    float* x = arena.alloc_floats(n);
    if (arena.counting()) return;
#pragma omp parallel if (n >= kParallelMinValues)
    {
      const Span share = team_share(n);
      widen_to_fp32(dt_, u16(elem16(inp, at)) + share.begin, x + share.begin, share.size());
#pragma omp barrier
      cpu::layernorm_backward_team(dinp + at, dweight, dbias, dout + at, x, weight, mean + r0,
                                   rstd + r0, rows, C);
    }
  });
}

void CpuBackend::linear_forward(void* out, const void* inp, const float* weight, const float* bias,
                                const void* residual, int N, int C, int OC, Arena& arena) {
  if (!half()) {
    if (arena.counting()) return;
    cpu::matmul_forward(f32(out), f32(inp), weight, bias, N, C, OC);
    if (residual != nullptr)
      cpu::residual_forward(f32(out), f32(residual), f32(out), size_t(N) * OC);
    return;
  }
  // y = x W^T: op(B) = W^T (C x OC), packed once for every row block.
  if (!arena.counting()) packed_weight_.pack(dt_, true, C, OC, weight_operand(weight, C));
  for_row_blocks(arena, N, kGemmRowBlock, [&](int r0, int rows) {
    const size_t n = size_t(rows) * OC;
    float* y = arena.alloc_floats(n);
    float* res = residual != nullptr ? arena.alloc_floats(n) : nullptr;
    if (arena.counting()) return;
    gemm16(dt_, false, rows, OC, C, 1.0f, Operand16{u16(elem16(inp, size_t(r0) * C)), C},
           packed_weight_, 0.0f, y, OC, bias);
    for_thread_rows(rows, OC, [&](int i0, int count) {
      const size_t at = size_t(i0) * OC, len = size_t(count) * OC, dst = size_t(r0) * OC + at;
      if (res != nullptr) {
        widen_to_fp32(dt_, u16(elem16(residual, dst)), res + at, len);
        cpu::residual_forward(y + at, res + at, y + at, len);
      }
      narrow_from_fp32(dt_, y + at, u16(elem16(out, dst)), len);
    });
  });
}

void CpuBackend::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const void* inp, const float* weight, int N, int C, int OC,
                                 Arena& arena) {
  if (!half()) {
    if (!arena.counting())
      cpu::matmul_backward(dinp, dweight, dbias, dout, f32(inp), weight, N, C, OC);
    return;
  }
  // dx = dy W: op(B) = W (OC x C), packed once for every row block.
  if (dinp != nullptr && !arena.counting())
    packed_weight_.pack(dt_, false, OC, C, weight_operand(weight, C));
  // Row blocks in a fixed order: dweight sums the blocks' products in that order, the same
  // on every call.
  for_row_blocks(arena, N, kGemmRowBlock, [&](int r0, int rows) {
    const float* dy = dout + size_t(r0) * OC;
    const size_t n = size_t(rows) * OC;
    const RoundedScratch rounded(dt_, arena, n);
    if (arena.counting()) return;
#pragma omp parallel if (n >= kParallelMinValues)
    {
      const Span share = team_share(n);
      rounded.fill(dy, share.begin, share.size());
      if (dbias != nullptr) cpu::add_rows_team(dbias, dy, rows, OC);
    }
    const Operand16 d = rounded.operand(OC);
    if (dinp != nullptr)
      gemm16(dt_, false, rows, C, OC, 1.0f, d, packed_weight_, 0.0f, dinp + size_t(r0) * C, C);
    gemm16(dt_, true, false, OC, C, rows, 1.0f, d, Operand16{u16(elem16(inp, size_t(r0) * C)), C},
           1.0f, dweight, C);
  });
}

void CpuBackend::logits_forward(float* logits, const void* inp, const float* wte, int N, int C,
                                int V, int vocab, Arena& arena) {
  if (arena.counting()) return;
  if (half())
    gemm16(dt_, false, true, N, V, C, 1.0f, Operand16{u16(inp), C}, weight_operand(wte, C), 0.0f,
           logits, V);
  else
    cpu::matmul_forward(logits, f32(inp), wte, static_cast<const float*>(nullptr), N, C, V);
  for (int n = 0; n < N && vocab < V; ++n)
    std::fill(logits + size_t(n) * V + vocab, logits + size_t(n + 1) * V,
              -std::numeric_limits<float>::infinity());
}

size_t CpuBackend::attention_state_bytes(int B, int T, int NH) const {
  return size_t(ringstep::attention_state_bytes(Device::cpu, dt_, B, T, NH));
}

void CpuBackend::attention_forward(void* out, void* att, const void* qkv, int B, int T, int C,
                                   int NH, Arena& arena) {
  if (arena.counting()) return;
  if (half())
    attention_forward16(dt_, u16(out), u16(att), u16(qkv), B, T, C, NH);
  else
    cpu::attention_forward(f32(out), f32(att), f32(qkv), B, T, C, NH);
}

void CpuBackend::attention_backward(float* dqkv, const float* dout, const void* qkv,
                                    const void* /*out*/, const void* att, int B, int T, int C,
                                    int NH, Arena& arena) {
  if (arena.counting()) return;
  if (half())
    attention_backward16(dt_, dqkv, dout, u16(qkv), u16(att), B, T, C, NH);
  else
    cpu::attention_backward(dqkv, dout, f32(qkv), f32(att), B, T, C, NH);
}

void CpuBackend::gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) {
  if (!half()) {
    if (!arena.counting()) cpu::gelu_forward(f32(out), f32(inp), size_t(N) * C);
    return;
  }
  rows_in_fp32(dt_, arena, out, inp, N, C, [&](float* y, const float* x, int, int rows) {
    cpu::gelu_forward(y, x, size_t(rows) * C);
  });
}

void CpuBackend::gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) {
  if (!half()) {
    if (!arena.counting()) cpu::gelu_backward_inplace(d, f32(inp), size_t(N) * C);
    return;
  }
  for_row_blocks(arena, N, kRowBlock, [&](int r0, int rows) {
    float* x = arena.alloc_floats(size_t(rows) * C);
    if (arena.counting()) return;
    for_thread_rows(rows, C, [&](int i0, int count) {
      const size_t at = size_t(i0) * C, len = size_t(count) * C, src = size_t(r0) * C + at;
      widen_to_fp32(dt_, u16(elem16(inp, src)), x + at, len);
      cpu::gelu_backward_inplace(d + src, x + at, len);
    });
  });
}

void CpuBackend::crossentropy_forward(float* losses, float* probs, const float* logits,
                                      const int32_t* targets, int N, int V, double* loss_sum,
                                      Arena& arena) {
  if (arena.counting()) return;
  cpu::softmax_crossentropy_forward(losses, probs, logits, targets, N, V);
  double sum = 0.0;
  for (int n = 0; n < N; ++n) sum += losses[n];
  *loss_sum += static_cast<float>(sum / N);
}

void CpuBackend::crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                       const float* dloss, int N, int V, Arena& arena) {
  if (!arena.counting())
    cpu::softmax_crossentropy_backward(dlogits, probs, targets, *dloss / N, N, V);
}

}  // namespace ringstep::cpu
