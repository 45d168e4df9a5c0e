// The GPT-2 style decoder: token + learned position embeddings, n_layers pre-LayerNorm
// blocks (causal multi-head attention with fused QKV, 4x MLP with tanh-GELU, residuals),
// a final LayerNorm and an LM head tied to the token embedding. All parameters live in one
// flat buffer laid out by one registry (docs/formats.md lists the order); gradients live
// in a second buffer with the same layout. forward() saves activations in the caller's
// arena; backward() adds into the gradient buffer and reports each finished layer so the
// trainer can start reducing it while earlier layers are still computing.
//
// Precision (docs/precision.md): parameters, gradients and optimizer state are fp32. With a
// 16-bit activation dtype, every saved activation is stored in 16 bits, matrix products
// take 16-bit inputs (activations, gradients w.r.t. activations and a 16-bit copy of the
// weights) with fp32 accumulation (core/cpu/gemm16.h), and everything else computes in
// fp32 on converted blocks. Every consumer reads the stored (rounded) value, never the fp32
// value before rounding, so a recomputed forward is bit-identical to the first one.
//
// Recomputation: a block is kept whole, or keeps only its input (full), or keeps its matrix
// products' outputs (selective); backward rebuilds what is missing one block at a time.
// One Gpt per training thread; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/registry.h"

namespace ringstep {

struct GptOptions {
  DType act_dtype = DType::f32;  // storage of saved activations: f32, bf16 or f16
  RecomputePolicy recompute = RecomputePolicy::none;
  int recompute_k = 2;  // every_k: blocks whose index is a multiple of k are recomputed
};

class Gpt {
 public:
  explicit Gpt(const ModelConfig& cfg, const GptOptions& opt = {});

  const ModelConfig& config() const { return cfg_; }
  const Registry& registry() const { return reg_; }
  const GptOptions& options() const { return opt_; }
  // Mutable access marks the 16-bit weight copy stale; the next forward refreshes it.
  FlatBuffer& params() {
    weights16_stale_ = true;
    return params_;
  }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() { return grads_; }

  // GPT-2 initialisation: weights N(0, 0.02), the two residual output projections
  // N(0, 0.02/sqrt(2 n_layers)), biases 0, LayerNorm weights 1. Same seed, same weights.
  void init(uint64_t seed);

  // Runs the model on inputs/targets [B, T] (T <= seq_len) and returns the mean loss.
  // Saved activations are carved from ARENA, which must stay untouched until backward().
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena);
  // Loss only (evaluation); activations are released before returning.
  float evaluate(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena);

  // Adds d(dloss_scale * mean loss)/d(params) into grads(). LAYER_DONE(l) is called once the
  // gradients of block l are final (l = n_layers-1 ... 0), then LAYER_DONE(-1) once the
  // embeddings' and final LayerNorm's are.
  void backward(float dloss_scale, Arena& arena,
                const std::function<void(int layer)>& layer_done = nullptr);

  // Bytes of arena the forward + backward of one micro-batch need (an upper bound).
  size_t arena_bytes(int B, int T) const;
  // Milliseconds the last backward() spent recomputing activations (0 with policy none).
  double last_recompute_ms() const { return recompute_ms_; }
  // Forward FLOPs per token that backward repeats under the recompute policy (for HFU).
  double recompute_flops_per_token() const;
  // Blocks whose activations are not all kept by forward.
  bool layer_recomputed(int layer) const;
  // The contiguous [begin, end) element range of block L's parameters (L = -1: embeddings
  // and final LayerNorm, which are not contiguous: use embedding_ranges()).
  std::pair<size_t, size_t> layer_range(int layer) const;
  std::vector<std::pair<size_t, size_t>> embedding_ranges() const;

  size_t param_count() const { return reg_.param_count(); }
  // N of the FLOPs formula: parameters without the position embeddings.
  size_t flops_param_count() const;
  // Model FLOPs per token, 6 N + 6 L C T (causal attention counted once).
  double model_flops_per_token() const;

 private:
  struct Layer {
    size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcp_w, fcp_b;
  };
  // A block's saved tensors. The void* ones hold act_dtype values; the LayerNorm
  // statistics are always fp32. Null = not kept (rebuilt by backward).
  struct LayerActs {
    void *ln1 = nullptr, *qkv = nullptr, *att = nullptr, *atty = nullptr, *res2 = nullptr,
         *ln2 = nullptr, *fch = nullptr, *fch_gelu = nullptr, *res3 = nullptr;
    float *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  };
  enum class Keep { all, input, selective };
  Keep keep(int layer) const;
  const float* p(size_t i) const { return params_.data() + reg_.at(i).offset; }
  const uint16_t* p16(size_t i) const { return weights16_.data() + reg_.at(i).offset; }
  float* g(size_t i) { return grads_.data() + reg_.at(i).offset; }
  bool half() const { return opt_.act_dtype != DType::f32; }
  size_t esize() const { return dtype_size(opt_.act_dtype); }

  // Element counts of a block's act_dtype tensors, in the order of act_slots().
  std::array<size_t, 9> act_sizes(int B, int T) const;
  static std::array<void**, 9> act_slots(LayerActs& a);

  // Storage helpers (see gpt.cpp).
  void* alloc_act(size_t n);
  void alloc_missing(LayerActs& a, Keep k);
  const float* load(const void* act, size_t n);
  void store(void* act, const float* src, size_t n);
  float* out_f32(void* act, size_t n);
  void refresh_weights16();

  // Ops on stored activations.
  void layernorm_fwd(void* out, float* mean, float* rstd, const void* in, size_t w, size_t b);
  // The LM head's logits [N, V] (fp32) from the final LayerNorm's output and wte.
  void logits_fwd(float* logits);
  void linear_bwd(float* din, size_t w, size_t b, const float* dout, const void* in, int C,
                  int OC);
  void attention_fwd(void* atty, void* att, const void* qkv);
  void attention_bwd(float* dqkv, const float* datty, const void* qkv, const void* att);
  void gelu_fwd(void* out, const void* in, size_t n);
  void gelu_bwd(float* d, const void* in, size_t n);
  // Writes act OUT = IN @ W^T + B (+ RESIDUAL if not null).
  void linear_fwd_act(void* out, const void* in, size_t w, size_t b, int C, int OC,
                      const void* residual);
  void layernorm_bwd(float* dres, size_t w, size_t b, const float* dout, const void* in,
                     const float* mean, const float* rstd);

  // Backward's fp32 buffers for gradients w.r.t. activations.
  struct DBufs {
    float *dres, *dln, *big;  // big: 4NC, shared by the MLP's and attention's gradients
  };
  float run_forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                    bool for_backward);
  void block_forward(int l, const void* x, LayerActs& a);
  void recompute_block(int l, const void* x, LayerActs& a, Keep k);
  void block_backward(int l, const void* x, const LayerActs& a, const DBufs& d);

  ModelConfig cfg_;
  GptOptions opt_;
  Registry reg_;
  FlatBuffer params_, grads_;
  std::vector<uint16_t> weights16_;  // act_dtype copy of params_ for the matrix products
  bool weights16_stale_ = true;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Layer> layers_;

  // State of the last forward (pointers into the caller's arena).
  Arena* arena_ = nullptr;
  double recompute_ms_ = 0;
  int B_ = 0, T_ = 0;
  size_t forward_mark_ = 0;  // arena mark at forward() entry; backward() releases to it
  std::vector<size_t> layer_marks_;  // arena mark before each block's saved tensors
  size_t head_mark_ = 0;             // arena mark before the final LayerNorm's
  DBufs d_{};
  const int32_t* inputs_ = nullptr;
  const int32_t* targets_ = nullptr;
  void* encoded_ = nullptr;
  std::vector<LayerActs> acts_;
  void* lnf_ = nullptr;
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *probs_ = nullptr, *losses_ = nullptr;
};

}  // namespace ringstep
