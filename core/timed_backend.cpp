// The cost model of each op (docs/metrics.md, "Measured roofline"). FLOPs: 2 per
// multiply-add of a matrix product (causal attention counted once, as in the model's
// 6N + 6LCT); element-wise ops at a few FLOPs per element, which only matters for the
// GFLOP/s column since their few FLOPs per byte make them bandwidth-bound. Bytes: the
// compulsory traffic, each tensor read or written once (Williams et al. 2009): S bytes per
// stored value (act_dtype), 4 per fp32 value, and read + write (8) for an fp32 output
// that backward adds into.
#include "core/timed_backend.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "core/dtype.h"

namespace ringstep {

TimedBackend::TimedBackend(std::unique_ptr<Backend> inner, OpClock& clock,
                           std::vector<std::pair<size_t, Op>> weight_ops)
    : inner_(std::move(inner)), clock_(clock), weight_ops_(std::move(weight_ops)) {}

template <class F>
auto TimedBackend::time(Op op, const Arena& arena, const OpCost& cost, F&& f) {
  const bool on = timing(arena);
  const int64_t t0 = on ? clock_.begin() : 0;
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    if (on) clock_.end(op, t0, cost);
  } else {
    auto result = f();
    if (on) clock_.end(op, t0, cost);
    return result;
  }
}

Op TimedBackend::weight_op(const float* weight) const {
  const size_t offset = size_t(weight - params_);
  for (const auto& [at, op] : weight_ops_)
    if (at == offset) return op;
  throw std::logic_error("TimedBackend: a matrix product's weight is no named parameter");
}

double TimedBackend::act_bytes() const { return double(dtype_size(inner_->act_dtype())); }

void TimedBackend::set_weights(const float* params, size_t n) {
  params_ = params;
  // A 16-bit backend reads the fp32 weights and writes its rounded copy.
  const double copy = inner_->act_dtype() == DType::f32 ? 0 : double(n) * (4 + act_bytes());
  const int64_t t0 = clock_.begin();
  inner_->set_weights(params, n);
  if (clock_.on() && copy > 0) clock_.end(Op::cast_weights, t0, {double(n), copy});
}

void TimedBackend::zero(float* x, size_t n, Arena& arena) {
  time(Op::zero, arena, {0, 4.0 * double(n)}, [&] { inner_->zero(x, n, arena); });
}

void TimedBackend::encoder_forward(void* out, const int32_t* tokens, const float* wte,
                                   const float* wpe, int B, int T, int C, Arena& arena) {
  const double NC = double(B) * T * C;
  time(Op::embedding, arena, {NC, NC * (8 + act_bytes())},
       [&] { inner_->encoder_forward(out, tokens, wte, wpe, B, T, C, arena); });
}

void TimedBackend::encoder_backward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int B, int T, int C, Arena& arena) {
  const double NC = double(B) * T * C;
  time(Op::embedding, arena, {2 * NC, NC * (4 + 16)},
       [&] { inner_->encoder_backward(dwte, dwpe, dout, tokens, B, T, C, arena); });
}

void TimedBackend::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                     const float* weight, const float* bias, int N, int C,
                                     Arena& arena) {
  const double NC = double(N) * C, S = act_bytes();
  time(Op::layernorm, arena, {8 * NC, NC * 2 * S + 8.0 * N + 8.0 * C},
       [&] { inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, arena); });
}

void TimedBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const void* inp, const float* weight, const float* mean,
                                      const float* rstd, int N, int C, Arena& arena) {
  const double NC = double(N) * C;
  time(Op::layernorm, arena, {12 * NC, NC * (4 + act_bytes() + 8) + 8.0 * N + 20.0 * C}, [&] {
    inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, arena);
  });
}

// out (N, OC) = inp (N, C) W^T: reads inp and W (the 16-bit copy on a 16-bit backend),
// writes out, and reads the residual when there is one.
void TimedBackend::linear_forward(void* out, const void* inp, const float* weight,
                                  const float* bias, const void* residual, int N, int C, int OC,
                                  Arena& arena) {
  const double n = N, c = C, oc = OC, S = act_bytes();
  const double bytes = S * (n * c + oc * c + n * oc * (residual ? 2 : 1)) + 4 * oc;
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  time(op, arena, {2 * n * c * oc, bytes},
       [&] { inner_->linear_forward(out, inp, weight, bias, residual, N, C, OC, arena); });
}

// dinp (N, C) += dout W and dW (OC, C) += dout^T inp: two products (one without dinp).
void TimedBackend::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const float* weight, int N, int C, int OC,
                                   Arena& arena) {
  const double n = N, c = C, oc = OC, S = act_bytes();
  const double flops = 2 * n * c * oc * (dinp ? 2 : 1);
  const double bytes = 4 * n * oc + S * n * c + 8 * oc * c + (dinp ? S * oc * c + 8 * n * c : 0) +
                       (dbias ? 8 * oc : 0);
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  time(op, arena, {flops, bytes},
       [&] { inner_->linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, arena); });
}

void TimedBackend::logits_forward(float* logits, const void* inp, const float* wte, int N, int C,
                                  int V, Arena& arena) {
  const double n = N, c = C, v = V, S = act_bytes();
  time(Op::lm_head, arena, {2 * n * c * v, S * (n * c + v * c) + 4 * n * v},
       [&] { inner_->logits_forward(logits, inp, wte, N, C, V, arena); });
}

// Causal: QK^T and PV over the lower triangle, 2 T^2 hd FLOPs per (sequence, head) in
// forward, twice that in backward (dQ, dK, dV, dP). Bytes: qkv, the saved state (the CPU's
// whole (T, T) probability tiles) and the output or its gradient.
void TimedBackend::attention_forward(void* out, void* state, const void* qkv, int B, int T, int C,
                                     int NH, Arena& arena) {
  const double NC = double(B) * T * C, TT = double(B) * NH * T * T, S = act_bytes();
  const double state_bytes = double(inner_->attention_state_bytes(B, T, NH));
  time(Op::attention, arena, {2 * NC * T + 5 * TT / 2, S * (3 * NC + NC) + state_bytes},
       [&] { inner_->attention_forward(out, state, qkv, B, T, C, NH, arena); });
}

void TimedBackend::attention_backward(float* dqkv, const float* dout, const void* qkv,
                                      const void* out, const void* state, int B, int T, int C,
                                      int NH, Arena& arena) {
  const double NC = double(B) * T * C, TT = double(B) * NH * T * T, S = act_bytes();
  const double state_bytes = double(inner_->attention_state_bytes(B, T, NH));
  time(Op::attention, arena,
       {4 * NC * T + 5 * TT / 2, S * 3 * NC + state_bytes + 4 * NC + 8 * 3 * NC},
       [&] { inner_->attention_backward(dqkv, dout, qkv, out, state, B, T, C, NH, arena); });
}

// tanh-GELU: about 8 FLOPs per element forward (the cube, the tanh), 16 backward.
void TimedBackend::gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) {
  const double NC = double(N) * C;
  time(Op::gelu, arena, {8 * NC, 2 * act_bytes() * NC},
       [&] { inner_->gelu_forward(out, inp, N, C, arena); });
}

void TimedBackend::gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) {
  const double NC = double(N) * C;
  time(Op::gelu, arena, {16 * NC, (8 + act_bytes()) * NC},
       [&] { inner_->gelu_backward(d, inp, N, C, arena); });
}

// Softmax (max, exp, sum, scale: ~4 per logit) and the loss; backward is one fused
// multiply-add per logit into dlogits.
float TimedBackend::crossentropy_forward(float* losses, float* probs, const float* logits,
                                         const int32_t* targets, int N, int V, Arena& arena) {
  const double NV = double(N) * V;
  return time(Op::softmax_xent, arena, {4 * NV, 8 * NV + 8.0 * N}, [&] {
    return inner_->crossentropy_forward(losses, probs, logits, targets, N, V, arena);
  });
}

void TimedBackend::crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                         float dloss, int N, int V, Arena& arena) {
  const double NV = double(N) * V;
  time(Op::softmax_xent, arena, {2 * NV, 12 * NV + 4.0 * N},
       [&] { inner_->crossentropy_backward(dlogits, probs, targets, dloss, N, V, arena); });
}

}  // namespace ringstep
