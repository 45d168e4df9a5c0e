// The cost model of each op (docs/metrics.md, "Measured roofline"): what one call of a
// backend op computes and moves, from its shapes alone. The timed backend
// (core/timed_backend.h) records these for every timed call, and the model's spec
// (models/gpt_spec.h) sums them over a whole step, so a prediction and a measurement
// count the same FLOPs and bytes.
//
// FLOPs: 2 per multiply-add of a matrix product (causal attention counted once, as in the
// model's 6N + 6LCT); element-wise ops at a few FLOPs per element, which only matters for
// the GFLOP/s column since their few FLOPs per byte make them bandwidth-bound. Bytes: the
// compulsory traffic, each tensor read or written once (Williams et al. 2009): S bytes per
// stored value (the activation dtype's size), 4 per fp32 value, and read + write (8) for
// an fp32 output that backward adds into.
#pragma once

#include "core/op_profile.h"

namespace ringstep::op_cost {

inline OpCost zero(double n) { return {0, 4 * n}; }

// NC = B T C values of the embedded tokens.
inline OpCost encoder_forward(double NC, double S) { return {NC, NC * (8 + S)}; }
inline OpCost encoder_backward(double NC) { return {2 * NC, NC * (4 + 16)}; }

inline OpCost layernorm_forward(double N, double C, double S) {
  return {8 * N * C, N * C * 2 * S + 8 * N + 8 * C};
}
inline OpCost layernorm_backward(double N, double C, double S) {
  return {12 * N * C, N * C * (4 + S + 8) + 8 * N + 20 * C};
}

// out (N, OC) = inp (N, C) W^T: reads inp and W (the 16-bit copy on a 16-bit backend),
// writes out, and reads the residual when there is one.
inline OpCost linear_forward(double N, double C, double OC, double S, bool residual) {
  return {2 * N * C * OC, S * (N * C + OC * C + N * OC * (residual ? 2 : 1)) + 4 * OC};
}
// dinp (N, C) += dout W and dW (OC, C) += dout^T inp: two products (one without dinp).
inline OpCost linear_backward(double N, double C, double OC, double S, bool dinp, bool dbias) {
  return {2 * N * C * OC * (dinp ? 2 : 1), 4 * N * OC + S * N * C + 8 * OC * C +
                                               (dinp ? S * OC * C + 8 * N * C : 0) +
                                               (dbias ? 8 * OC : 0)};
}
inline OpCost logits_forward(double N, double C, double V, double S) {
  return {2 * N * C * V, S * (N * C + V * C) + 4 * N * V};
}

// Causal: QK^T and PV over the lower triangle, 2 T^2 hd FLOPs per (sequence, head) in
// forward, twice that in backward (dQ, dK, dV, dP). Bytes: qkv, the saved state (STATE
// bytes, the backend's format) and the output or its gradient.
inline OpCost attention_forward(double B, double T, double C, double NH, double S, double state) {
  const double NC = B * T * C, TT = B * NH * T * T;
  return {2 * NC * T + 5 * TT / 2, S * (3 * NC + NC) + state};
}
inline OpCost attention_backward(double B, double T, double C, double NH, double S, double state) {
  const double NC = B * T * C, TT = B * NH * T * T;
  return {4 * NC * T + 5 * TT / 2, S * 3 * NC + state + 4 * NC + 8 * 3 * NC};
}

// tanh-GELU: about 8 FLOPs per element forward (the cube, the tanh), 16 backward.
inline OpCost gelu_forward(double n, double S) { return {8 * n, 2 * S * n}; }
inline OpCost gelu_backward(double n, double S) { return {16 * n, (8 + S) * n}; }

// Softmax (max, exp, sum, scale: ~4 per logit) and the loss; backward is one fused
// multiply-add per logit into dlogits.
inline OpCost crossentropy_forward(double N, double V) { return {4 * N * V, 8 * N * V + 8 * N}; }
inline OpCost crossentropy_backward(double N, double V) { return {2 * N * V, 12 * N * V + 4 * N}; }

// A 16-bit backend reads the N fp32 weights and writes its rounded copy.
inline OpCost cast_weights(double n, double S) { return {n, n * (4 + S)}; }

// The update over N parameters: the global norm reads each gradient (2 FLOPs, 4 bytes per
// parameter); AdamW reads the gradient and reads and writes the parameter and both moments
// (about 12 FLOPs and 28 bytes).
inline OpCost optimizer_update(double n) { return {14 * n, 32 * n}; }

}  // namespace ringstep::op_cost
