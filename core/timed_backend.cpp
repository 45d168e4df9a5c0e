// Each call is timed with its cost from core/op_cost.h (the one home of the formulas).
#include "core/timed_backend.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "core/dtype.h"
#include "core/op_cost.h"

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
  const bool cast = inner_->act_dtype() != DType::f32;
  const int64_t t0 = clock_.begin();
  inner_->set_weights(params, n);
  if (clock_.on() && cast) clock_.end(Op::cast_weights, t0, op_cost::cast_weights(n, act_bytes()));
}

void TimedBackend::zero(float* x, size_t n, Arena& arena) {
  time(Op::zero, arena, op_cost::zero(double(n)), [&] { inner_->zero(x, n, arena); });
}

void TimedBackend::encoder_forward(void* out, const int32_t* tokens, const float* wte,
                                   const float* wpe, int B, int T, int C, Arena& arena) {
  time(Op::embedding, arena, op_cost::encoder_forward(double(B) * T * C, act_bytes()),
       [&] { inner_->encoder_forward(out, tokens, wte, wpe, B, T, C, arena); });
}

void TimedBackend::encoder_backward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int B, int T, int C, Arena& arena) {
  time(Op::embedding, arena, op_cost::encoder_backward(double(B) * T * C),
       [&] { inner_->encoder_backward(dwte, dwpe, dout, tokens, B, T, C, arena); });
}

void TimedBackend::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                     const float* weight, const float* bias, int N, int C,
                                     Arena& arena) {
  time(Op::layernorm, arena, op_cost::layernorm_forward(N, C, act_bytes()),
       [&] { inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, arena); });
}

void TimedBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const void* inp, const float* weight, const float* mean,
                                      const float* rstd, int N, int C, Arena& arena) {
  time(Op::layernorm, arena, op_cost::layernorm_backward(N, C, act_bytes()), [&] {
    inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, arena);
  });
}

void TimedBackend::linear_forward(void* out, const void* inp, const float* weight,
                                  const float* bias, const void* residual, int N, int C, int OC,
                                  Arena& arena) {
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  time(op, arena, op_cost::linear_forward(N, C, OC, act_bytes(), residual != nullptr),
       [&] { inner_->linear_forward(out, inp, weight, bias, residual, N, C, OC, arena); });
}

void TimedBackend::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const float* weight, int N, int C, int OC,
                                   Arena& arena) {
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  time(op, arena,
       op_cost::linear_backward(N, C, OC, act_bytes(), dinp != nullptr, dbias != nullptr),
       [&] { inner_->linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, arena); });
}

void TimedBackend::logits_forward(float* logits, const void* inp, const float* wte, int N, int C,
                                  int V, int vocab, Arena& arena) {
  time(Op::lm_head, arena, op_cost::logits_forward(N, C, V, act_bytes()),
       [&] { inner_->logits_forward(logits, inp, wte, N, C, V, vocab, arena); });
}

void TimedBackend::attention_forward(void* out, void* state, const void* qkv, int B, int T, int C,
                                     int NH, Arena& arena) {
  const double state_bytes = double(inner_->attention_state_bytes(B, T, NH));
  time(Op::attention, arena, op_cost::attention_forward(B, T, C, NH, act_bytes(), state_bytes),
       [&] { inner_->attention_forward(out, state, qkv, B, T, C, NH, arena); });
}

void TimedBackend::attention_backward(float* dqkv, const float* dout, const void* qkv,
                                      const void* out, const void* state, int B, int T, int C,
                                      int NH, Arena& arena) {
  const double state_bytes = double(inner_->attention_state_bytes(B, T, NH));
  time(Op::attention, arena, op_cost::attention_backward(B, T, C, NH, act_bytes(), state_bytes),
       [&] { inner_->attention_backward(dqkv, dout, qkv, out, state, B, T, C, NH, arena); });
}

void TimedBackend::gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) {
  time(Op::gelu, arena, op_cost::gelu_forward(double(N) * C, act_bytes()),
       [&] { inner_->gelu_forward(out, inp, N, C, arena); });
}

void TimedBackend::gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) {
  time(Op::gelu, arena, op_cost::gelu_backward(double(N) * C, act_bytes()),
       [&] { inner_->gelu_backward(d, inp, N, C, arena); });
}

namespace {
OpCost plus(const OpCost& a, const OpCost& b) { return {a.flops + b.flops, a.bytes + b.bytes}; }
}  // namespace

void TimedBackend::linear_gelu_forward(void* out, void* pre, const void* inp, const float* weight,
                                       const float* bias, int N, int C, int OC, Arena& arena) {
  if (!inner_->fuses_gelu()) {
    Backend::linear_gelu_forward(out, pre, inp, weight, bias, N, C, OC, arena);
    return;
  }
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  const OpCost cost = plus(op_cost::linear_forward(N, C, OC, act_bytes(), false),
                           op_cost::gelu_forward(double(N) * OC, act_bytes()));
  time(op, arena, cost,
       [&] { inner_->linear_gelu_forward(out, pre, inp, weight, bias, N, C, OC, arena); });
}

void TimedBackend::linear_backward_gelu(float* dinp, float* dweight, float* dbias,
                                        const float* dout, const void* inp, const float* weight,
                                        const void* gelu_inp, int N, int C, int OC, Arena& arena) {
  if (!inner_->fuses_gelu()) {
    Backend::linear_backward_gelu(dinp, dweight, dbias, dout, inp, weight, gelu_inp, N, C, OC,
                                  arena);
    return;
  }
  const Op op = timing(arena) ? weight_op(weight) : Op{};  // Op{}: not timed
  const OpCost cost =
      plus(op_cost::linear_backward(N, C, OC, act_bytes(), true, dbias != nullptr),
           op_cost::gelu_backward(double(N) * C, act_bytes()));
  time(op, arena, cost, [&] {
    inner_->linear_backward_gelu(dinp, dweight, dbias, dout, inp, weight, gelu_inp, N, C, OC,
                                 arena);
  });
}

void TimedBackend::crossentropy_forward(float* losses, float* probs, const float* logits,
                                        const int32_t* targets, int N, int V, double* loss_sum,
                                        Arena& arena) {
  time(Op::softmax_xent, arena, op_cost::crossentropy_forward(N, V), [&] {
    inner_->crossentropy_forward(losses, probs, logits, targets, N, V, loss_sum, arena);
  });
}

void TimedBackend::crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                         const float* dloss, int N, int V, Arena& arena) {
  time(Op::softmax_xent, arena, op_cost::crossentropy_backward(N, V),
       [&] { inner_->crossentropy_backward(dlogits, probs, targets, dloss, N, V, arena); });
}

}  // namespace ringstep
