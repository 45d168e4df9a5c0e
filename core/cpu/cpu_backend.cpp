#include "core/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "core/cpu/attention16.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"

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

void round_to(DType dt, const float* in, float* out, size_t n) {
  for_convert_chunks(n, [&](size_t b, size_t len) { round_to_dtype(dt, in + b, out + b, len); });
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

// An fp32 copy of N stored DT values at ACT, in arena scratch (unfilled when counting).
const float* load(DType dt, Arena& arena, const void* act, size_t n) {
  float* buf = arena.alloc_floats(n);
  if (!arena.counting()) widen(dt, u16(act), buf, n);
  return buf;
}

// N fp32 values X (leading dim LD) rounded to DT in arena scratch, held the way gemm16 reads
// them: kept in fp32 where gemm16 widens (so no product widens them again), else as 16-bit
// bits. Unfilled when counting.
Operand16 rounded_operand(DType dt, Arena& arena, const float* x, size_t n, int ld) {
  if (gemm16_widens(dt)) {
    float* wide = arena.alloc_floats(n);
    if (!arena.counting()) round_to(dt, x, wide, n);
    return {nullptr, 0, wide, ld};
  }
  auto* bits = static_cast<uint16_t*>(arena.alloc_bytes(n * sizeof(uint16_t)));
  if (!arena.counting()) narrow(dt, x, bits, n);
  return {bits, ld};
}

// A row-wise op on 16-bit storage: for each block of kRowBlock rows of INP (N, C), widens
// the block to x, calls FN(y, x, r0, rows) for the fp32 result y, and rounds y into OUT.
template <typename Fn>
void rows_in_fp32(DType dt, Arena& arena, void* out, const void* inp, int N, int C, Fn&& fn) {
  for_row_blocks(arena, N, CpuBackend::kRowBlock, [&](int r0, int rows) {
    const size_t at = size_t(r0) * C, n = size_t(rows) * C;
    const float* x = load(dt, arena, elem16(inp, at), n);
    float* y = arena.alloc_floats(n);
    if (arena.counting()) return;
    fn(y, x, r0, rows);
    narrow(dt, y, u16(elem16(out, at)), n);
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
    const size_t at = size_t(r0) * C;
    const float* x = load(dt_, arena, elem16(inp, at), size_t(rows) * C);
    if (arena.counting()) return;
    cpu::layernorm_backward(dinp + at, dweight, dbias, dout + at, x, weight, mean + r0, rstd + r0,
                            rows, C);
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
  for_row_blocks(arena, N, kGemmRowBlock, [&](int r0, int rows) {
    const size_t n = size_t(rows) * OC;
    float* y = arena.alloc_floats(n);
    const float* res =
        residual != nullptr ? load(dt_, arena, elem16(residual, size_t(r0) * OC), n) : nullptr;
    if (arena.counting()) return;
    gemm16(dt_, false, true, rows, OC, C, 1.0f, Operand16{u16(elem16(inp, size_t(r0) * C)), C},
           weight_operand(weight, C), 0.0f, y, OC, bias);
    if (res != nullptr) cpu::residual_forward(y, res, y, n);
    narrow(dt_, y, u16(elem16(out, size_t(r0) * OC)), n);
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
  // Row blocks in a fixed order: dweight sums the blocks' products in that order, the same
  // on every call.
  for_row_blocks(arena, N, kGemmRowBlock, [&](int r0, int rows) {
    const float* dy = dout + size_t(r0) * OC;
    const Operand16 d = rounded_operand(dt_, arena, dy, size_t(rows) * OC, OC);
    if (arena.counting()) return;
    if (dinp != nullptr)
      gemm16(dt_, false, false, rows, C, OC, 1.0f, d, weight_operand(weight, C), 0.0f,
             dinp + size_t(r0) * C, C);
    gemm16(dt_, true, false, OC, C, rows, 1.0f, d, Operand16{u16(elem16(inp, size_t(r0) * C)), C},
           1.0f, dweight, C);
    if (dbias != nullptr)
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < OC; ++o) dbias[o] += dy[size_t(r) * OC + o];
  });
}

void CpuBackend::logits_forward(float* logits, const void* inp, const float* wte, int N, int C,
                                int V, Arena& arena) {
  if (arena.counting()) return;
  if (half())
    gemm16(dt_, false, true, N, V, C, 1.0f, Operand16{u16(inp), C}, weight_operand(wte, C), 0.0f,
           logits, V);
  else
    cpu::matmul_forward(logits, f32(inp), wte, static_cast<const float*>(nullptr), N, C, V);
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
                                    const void* att, int B, int T, int C, int NH, Arena& arena) {
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
    const size_t at = size_t(r0) * C, n = size_t(rows) * C;
    const float* x = load(dt_, arena, elem16(inp, at), n);
    if (arena.counting()) return;
    cpu::gelu_backward_inplace(d + at, x, n);
  });
}

float CpuBackend::crossentropy_forward(float* losses, float* probs, const float* logits,
                                       const int32_t* targets, int N, int V, Arena& arena) {
  if (arena.counting()) return 0.0f;
  cpu::softmax_crossentropy_forward(losses, probs, logits, targets, N, V);
  double sum = 0.0;
  for (int n = 0; n < N; ++n) sum += losses[n];
  return static_cast<float>(sum / N);
}

void CpuBackend::crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                       float dloss, int N, int V, Arena& arena) {
  if (!arena.counting()) cpu::softmax_crossentropy_backward(dlogits, probs, targets, dloss, N, V);
}

}  // namespace ringstep::cpu
