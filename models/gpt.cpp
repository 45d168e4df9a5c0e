#include "models/gpt.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/cpu/ops.h"
#include "core/rng.h"

namespace ringstep {

using namespace ringstep::cpu;

Gpt::Gpt(const ModelConfig& cfg) : cfg_(cfg) {
  const int64_t V = cfg.vocab_size, T = cfg.seq_len, C = cfg.d_model;
  // Order: embeddings, blocks 0..L-1 each contiguous, final LayerNorm. docs/formats.md.
  wte_ = reg_.add("wte", {V, C});
  wpe_ = reg_.add("wpe", {T, C});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = reg_.add(h + "ln1.weight", {C}, false);
    L.ln1_b = reg_.add(h + "ln1.bias", {C}, false);
    L.qkv_w = reg_.add(h + "attn.qkv.weight", {3 * C, C});
    L.qkv_b = reg_.add(h + "attn.qkv.bias", {3 * C}, false);
    L.proj_w = reg_.add(h + "attn.proj.weight", {C, C});
    L.proj_b = reg_.add(h + "attn.proj.bias", {C}, false);
    L.ln2_w = reg_.add(h + "ln2.weight", {C}, false);
    L.ln2_b = reg_.add(h + "ln2.bias", {C}, false);
    L.fc_w = reg_.add(h + "mlp.fc.weight", {4 * C, C});
    L.fc_b = reg_.add(h + "mlp.fc.bias", {4 * C}, false);
    L.fcp_w = reg_.add(h + "mlp.proj.weight", {C, 4 * C});
    L.fcp_b = reg_.add(h + "mlp.proj.bias", {C}, false);
    layers_.push_back(L);
  }
  lnf_w_ = reg_.add("lnf.weight", {C}, false);
  lnf_b_ = reg_.add("lnf.bias", {C}, false);
  params_ = FlatBuffer(reg_.total_numel());
  grads_ = FlatBuffer(reg_.total_numel());
}

void Gpt::init(uint64_t seed) {
  params_.zero();
  const float residual_std = 0.02f / std::sqrt(2.0f * cfg_.n_layers);
  for (size_t i = 0; i < reg_.size(); ++i) {
    const TensorInfo& t = reg_.at(i);
    float* w = params_.at(t);
    const bool is_ln_weight = t.name.find("ln") != std::string::npos &&
                              t.name.find(".weight") != std::string::npos;
    if (is_ln_weight) {
      for (size_t k = 0; k < t.numel; ++k) w[k] = 1.0f;
    } else if (t.shape.size() == 2) {
      const bool residual_out = t.name.find("proj.weight") != std::string::npos;
      fill_normal(w, t.numel, residual_out ? residual_std : 0.02f, seed, i);
    }
  }
}

std::vector<size_t> Gpt::layer_act_sizes(const ModelConfig& c, int B, int T) {
  const size_t N = size_t(B) * T, C = c.d_model;
  // In LayerActs order: ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean,
  // ln2_rstd, fch, fch_gelu, res3.
  return {N * C, N, N, 3 * N * C, size_t(B) * c.n_heads * T * T, N * C, N * C,
          N * C, N,  N, 4 * N * C, 4 * N * C,  N * C};
}

static size_t rounded(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

size_t Gpt::arena_bytes(int B, int T) const {
  const size_t N = size_t(B) * T, C = cfg_.d_model, V = cfg_.vocab_size;
  size_t bytes = rounded(N * C);  // encoded
  for (int l = 0; l < cfg_.n_layers; ++l)
    for (size_t s : layer_act_sizes(cfg_, B, T)) bytes += rounded(s);
  for (size_t s : {N * C, N, N, N * V, N * V, N}) bytes += rounded(s);  // lnf .. losses
  // backward scratch: dres, dln, dqkv, datty, dfch, dgelu, dlogits
  for (size_t s : {N * C, N * C, 3 * N * C, N * C, 4 * N * C, 4 * N * C, N * V})
    bytes += rounded(s);
  return bytes;
}

void Gpt::block_forward(int l, const float* x, LayerActs& a) {
  const Layer& L = layers_[l];
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_heads, N = B * T;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p(L.ln1_w), p(L.ln1_b), N, C);
  matmul_forward(a.qkv, a.ln1, p(L.qkv_w), p(L.qkv_b), N, C, 3 * C);
  attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  matmul_forward(a.res2, a.atty, p(L.proj_w), p(L.proj_b), N, C, C);
  residual_forward(a.res2, x, a.res2, size_t(N) * C);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p(L.ln2_w), p(L.ln2_b), N, C);
  matmul_forward(a.fch, a.ln2, p(L.fc_w), p(L.fc_b), N, C, 4 * C);
  gelu_forward(a.fch_gelu, a.fch, size_t(N) * 4 * C);
  matmul_forward(a.res3, a.fch_gelu, p(L.fcp_w), p(L.fcp_b), N, 4 * C, C);
  residual_forward(a.res3, a.res2, a.res3, size_t(N) * C);
}

float Gpt::forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  B_ = B;
  T_ = T;
  forward_mark_ = arena.mark();
  inputs_ = inputs;
  targets_ = targets;
  const int C = cfg_.d_model, V = cfg_.vocab_size, N = B * T;
  encoded_ = arena.alloc_floats(size_t(N) * C);
  encoder_forward(encoded_, inputs, p(wte_), p(wpe_), B, T, C);
  acts_.assign(cfg_.n_layers, LayerActs{});
  const float* x = encoded_;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    LayerActs& a = acts_[l];
    std::vector<size_t> sizes = layer_act_sizes(cfg_, B, T);
    float** slots[] = {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv,      &a.att,
                       &a.atty, &a.res2,    &a.ln2,      &a.ln2_mean, &a.ln2_rstd,
                       &a.fch,  &a.fch_gelu, &a.res3};
    for (size_t k = 0; k < sizes.size(); ++k) *slots[k] = arena.alloc_floats(sizes[k]);
    block_forward(l, x, a);
    x = a.res3;
  }
  lnf_ = arena.alloc_floats(size_t(N) * C);
  lnf_mean_ = arena.alloc_floats(N);
  lnf_rstd_ = arena.alloc_floats(N);
  logits_ = arena.alloc_floats(size_t(N) * V);
  probs_ = arena.alloc_floats(size_t(N) * V);
  losses_ = arena.alloc_floats(N);
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, p(lnf_w_), p(lnf_b_), N, C);
  matmul_forward(logits_, lnf_, p(wte_), static_cast<const float*>(nullptr), N, C, V);
  softmax_crossentropy_forward(losses_, probs_, logits_, targets, N, V);
  double sum = 0.0;
  for (int n = 0; n < N; ++n) sum += losses_[n];
  return static_cast<float>(sum / N);
}

float Gpt::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  const size_t mark = arena.mark();
  float loss = forward(inputs, targets, B, T, arena);
  arena.release_to(mark);
  return loss;
}

void Gpt::backward(float dloss_scale, Arena& arena,
                   const std::function<void(int)>& layer_done) {
  const int B = B_, T = T_, C = cfg_.d_model, V = cfg_.vocab_size, NH = cfg_.n_heads;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto zeroed = [&](size_t n) {
    float* buf = arena.alloc_floats(n);
    std::memset(buf, 0, n * sizeof(float));
    return buf;
  };
  float* dres = zeroed(NC);
  float* dln = arena.alloc_floats(NC);
  float* dqkv = arena.alloc_floats(3 * NC);
  float* datty = arena.alloc_floats(NC);
  float* dfch = arena.alloc_floats(4 * NC);
  float* dgelu = arena.alloc_floats(4 * NC);
  float* dlogits = zeroed(size_t(N) * V);

  // Mean over N tokens, times the caller's scale (1/grad_accum_steps, loss scale).
  softmax_crossentropy_backward(dlogits, probs_, targets_, dloss_scale / N, N, V);
  std::memset(dln, 0, NC * sizeof(float));
  matmul_backward(dln, g(wte_), static_cast<float*>(nullptr), dlogits, lnf_, p(wte_), N, C, V);
  const float* x_last = cfg_.n_layers > 0 ? acts_.back().res3 : encoded_;
  layernorm_backward(dres, g(lnf_w_), g(lnf_b_), dln, x_last, p(lnf_w_), lnf_mean_, lnf_rstd_,
                     N, C);

  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const Layer& L = layers_[l];
    LayerActs& a = acts_[l];
    const float* x = l > 0 ? acts_[l - 1].res3 : encoded_;
    // res3 = res2 + mlp(ln2(res2)): dres flows to both; the MLP branch adds into dres.
    std::memset(dgelu, 0, 4 * NC * sizeof(float));
    matmul_backward(dgelu, g(L.fcp_w), g(L.fcp_b), dres, a.fch_gelu, p(L.fcp_w), N, 4 * C, C);
    std::memset(dfch, 0, 4 * NC * sizeof(float));
    gelu_backward(dfch, a.fch, dgelu, 4 * NC);
    std::memset(dln, 0, NC * sizeof(float));
    matmul_backward(dln, g(L.fc_w), g(L.fc_b), dfch, a.ln2, p(L.fc_w), N, C, 4 * C);
    layernorm_backward(dres, g(L.ln2_w), g(L.ln2_b), dln, a.res2, p(L.ln2_w), a.ln2_mean,
                       a.ln2_rstd, N, C);
    // res2 = x + proj(attn(ln1(x)))
    std::memset(datty, 0, NC * sizeof(float));
    matmul_backward(datty, g(L.proj_w), g(L.proj_b), dres, a.atty, p(L.proj_w), N, C, C);
    std::memset(dqkv, 0, 3 * NC * sizeof(float));
    attention_backward(dqkv, datty, a.qkv, a.att, B, T, C, NH);
    std::memset(dln, 0, NC * sizeof(float));
    matmul_backward(dln, g(L.qkv_w), g(L.qkv_b), dqkv, a.ln1, p(L.qkv_w), N, C, 3 * C);
    layernorm_backward(dres, g(L.ln1_w), g(L.ln1_b), dln, x, p(L.ln1_w), a.ln1_mean,
                       a.ln1_rstd, N, C);
    if (layer_done) layer_done(l);
  }
  encoder_backward(g(wte_), g(wpe_), dres, inputs_, B, T, C);
  if (layer_done) layer_done(-1);
  arena.release_to(forward_mark_);
}

std::pair<size_t, size_t> Gpt::layer_range(int layer) const {
  const Layer& L = layers_[layer];
  return {reg_.at(L.ln1_w).offset, reg_.at(L.fcp_b).offset + reg_.at(L.fcp_b).numel};
}

std::vector<std::pair<size_t, size_t>> Gpt::embedding_ranges() const {
  auto range = [&](size_t i) {
    return std::pair<size_t, size_t>{reg_.at(i).offset, reg_.at(i).offset + reg_.at(i).numel};
  };
  return {range(wte_), range(wpe_), {reg_.at(lnf_w_).offset, reg_.total_numel()}};
}

size_t Gpt::flops_param_count() const { return reg_.param_count() - reg_.at(wpe_).numel; }

double Gpt::model_flops_per_token() const {
  return 6.0 * double(flops_param_count()) +
         6.0 * cfg_.n_layers * cfg_.d_model * double(cfg_.seq_len);
}

}  // namespace ringstep
