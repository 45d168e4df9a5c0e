// The GPT-2 style decoder: token + learned position embeddings, n_layers pre-LayerNorm
// blocks (causal multi-head attention with fused QKV, 4x MLP with tanh-GELU, residuals),
// a final LayerNorm and an LM head tied to the token embedding. All parameters live in one
// flat buffer laid out by one registry (docs/formats.md lists the order); gradients live
// in a second buffer with the same layout. forward() saves activations in the caller's
// arena; backward() adds into the gradient buffer and reports each finished layer so the
// trainer can start reducing it while earlier layers are still computing.
// One Gpt per training thread; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "core/config.h"
#include "core/registry.h"

namespace ringstep {

class Gpt {
 public:
  explicit Gpt(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const Registry& registry() const { return reg_; }
  FlatBuffer& params() { return params_; }
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

  // Bytes of arena the forward + backward of one micro-batch need.
  size_t arena_bytes(int B, int T) const;
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
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *res3;
  };
  const float* p(size_t i) const { return params_.data() + reg_.at(i).offset; }
  float* g(size_t i) { return grads_.data() + reg_.at(i).offset; }
  void block_forward(int l, const float* x, LayerActs& a);
  static std::vector<size_t> layer_act_sizes(const ModelConfig& c, int B, int T);

  ModelConfig cfg_;
  Registry reg_;
  FlatBuffer params_, grads_;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Layer> layers_;

  // State of the last forward (pointers into the caller's arena).
  int B_ = 0, T_ = 0;
  size_t forward_mark_ = 0;  // arena mark at forward() entry; backward() releases to it
  const int32_t* inputs_ = nullptr;
  const int32_t* targets_ = nullptr;
  float* encoded_ = nullptr;
  std::vector<LayerActs> acts_;
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr,
        *probs_ = nullptr, *losses_ = nullptr;
};

}  // namespace ringstep
