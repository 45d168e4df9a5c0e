// The CPU op list: one forward and one backward function per op (llm.c style), explicit
// shapes, row-major arrays. Backward functions ADD into their parameter gradients (+=), so
// gradient accumulation needs no copy; the gradient w.r.t. an op's own input (matmul's dinp,
// the cross-entropy's dlogits) is WRITTEN, old contents ignored, so the caller need not zero
// it first. Where several consumers of one activation add up, the comment says +=.
// Templated on the scalar (float for training, double for finite-difference tests).
// Matrix products run on the caller's buffers (no copies): sgemm.h's kernels in float,
// Eigen (dgemm under EIGEN_USE_BLAS) in double.
//
// Shapes: B batch, Tt sequence length, C channels, NH heads (C % NH == 0), V vocabulary,
// N = B*Tt rows.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringstep::cpu {

// out[N,C] = wte[tokens[n]] + wpe[n % Tt]
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tt,
                     int C);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tt, int C);

// out = (inp - mean) * rstd * weight + bias over the last axis (eps 1e-5);
// mean[N] and rstd[N] are saved for backward.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// Team variants: every thread of the calling OpenMP team calls them with the same
// arguments and does its share of the work. They open no region of their own (outside one,
// a single thread does all of it) and end without a barrier: the end of the caller's region,
// or a barrier, must come before anything reads their output.
// layernorm_backward, shared by the team.
template <typename T>
void layernorm_backward_team(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, const T* mean, const T* rstd, int N, int C);
// sum[C] += the N rows of rows[N, C], added in row order.
template <typename T>
void add_rows_team(T* sum, const T* rows, int N, int C);

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]; bias may be null.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp[N,C] = dout @ weight (written); dweight[OC,C] += dout^T @ inp; dbias[OC] += sum_n
// dout. dinp and dbias may be null (not needed).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

// Causal multi-head self-attention. qkv[B,Tt,3C] holds q | k | v; head h uses channels
// [h*hs, (h+1)*hs) of each, hs = C/NH. att[B,NH,Tt,Tt] receives the softmax probabilities
// of softmax(q k^T / sqrt(hs)) with the causal mask (entries above the diagonal are 0).
// out[B,Tt,C] = att @ v with heads side by side.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tt, int C, int NH);
// dqkv[B,Tt,3C] += gradient through the op; uses att saved by forward.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tt, int C,
                        int NH);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);
// d = d * GELU'(inp), in place: the same values gelu_backward adds into a zeroed dinp.
template <typename T>
void gelu_backward_inplace(T* d, const T* inp, size_t n);

// out = a + b
template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);
// da += dout; db += dout
template <typename T>
void residual_backward(T* da, T* db, const T* dout, size_t n);

// probs[N,V] = softmax(logits); losses[N] = -log probs[n, targets[n]].
template <typename T>
void softmax_crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                                  int N, int V);
// dlogits[N,V] = (probs - onehot(targets)) * dloss (written), where dloss is dL/dlosses[n]
// (the same for every row: 1/(N*grad_accum) for a mean loss).
template <typename T>
void softmax_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                                   int N, int V);

}  // namespace ringstep::cpu
