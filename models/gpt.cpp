#include "models/gpt.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/cpu/attention16.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace ringstep {

using namespace ringstep::cpu;

Gpt::Gpt(const ModelConfig& cfg, const GptOptions& opt) : cfg_(cfg), opt_(opt) {
  if (opt_.recompute_k < 1) throw InputError("recompute.k must be >= 1");
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

namespace {

constexpr size_t kNoBias = SIZE_MAX;

// Releases everything an op allocated from the arena when the op returns.
class Scratch {
 public:
  explicit Scratch(Arena& a) : arena_(a), mark_(a.mark()) {}
  ~Scratch() { arena_.release_to(mark_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

}  // namespace

Gpt::Keep Gpt::keep(int layer) const {
  switch (opt_.recompute) {
    case RecomputePolicy::none: return Keep::all;
    case RecomputePolicy::full: return Keep::input;
    case RecomputePolicy::every_k: return layer % opt_.recompute_k == 0 ? Keep::input : Keep::all;
    case RecomputePolicy::selective: return Keep::selective;
  }
  return Keep::all;
}

bool Gpt::layer_recomputed(int layer) const { return keep(layer) != Keep::all; }

double Gpt::recompute_flops_per_token() const {
  const double C = cfg_.d_model, T = cfg_.seq_len;
  double flops = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    // Forward GEMMs of a block are 2 x (3C^2 + C^2 + 4C^2 + 4C^2) per token and causal
    // attention 2 C T (docs/metrics.md). A full recompute stops before the MLP's output
    // projection (backward does not need the block output); selective redoes attention.
    if (keep(l) == Keep::input) flops += 2.0 * 8 * C * C + 2.0 * C * T;
    if (keep(l) == Keep::selective) flops += 2.0 * C * T;
  }
  return flops;
}

static size_t rounded(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

std::array<size_t, 9> Gpt::act_sizes(int B, int T) const {
  const size_t N = size_t(B) * T, C = cfg_.d_model;
  // In act_slots() order: ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, res3.
  return {N * C, 3 * N * C, size_t(B) * cfg_.n_heads * T * T, N * C, N * C,
          N * C, 4 * N * C, 4 * N * C,                        N * C};
}

std::array<void**, 9> Gpt::act_slots(LayerActs& a) {
  return {&a.ln1, &a.qkv, &a.att, &a.atty, &a.res2, &a.ln2, &a.fch, &a.fch_gelu, &a.res3};
}

size_t Gpt::arena_bytes(int B, int T) const {
  // An upper bound: every tensor counted as fp32 and kept, plus one block of recompute
  // temporaries and the largest per-op scratch of the 16-bit path.
  const size_t N = size_t(B) * T, C = cfg_.d_model, V = cfg_.vocab_size;
  const size_t H = cfg_.n_heads;
  size_t one_layer = 4 * rounded(N);  // LayerNorm statistics
  for (size_t s : act_sizes(B, T)) one_layer += rounded(s);
  size_t bytes = rounded(N * C) + (cfg_.n_layers + 1) * one_layer + rounded(N * C);
  for (size_t s : {N * C, N, N, N * V, N * V, N}) bytes += rounded(s);  // lnf .. logits, losses
  // backward's buffers, counted generously (14 N C + N V; they take 6 N C + N V)
  for (size_t s : {N * C, N * C, 3 * N * C, N * C, 4 * N * C, 4 * N * C, N * V})
    bytes += rounded(s);
  // 16-bit path scratch: fp32 views of row blocks (at most 4 N C or N x V each) and
  // attention's per-thread blocks, again generously.
  bytes += 2 * rounded(std::max(4 * N * C, N * V)) + rounded(size_t(T) * 3 * C) +
           rounded(H * T * T) + rounded(size_t(T) * C) + rounded(N * std::max(4 * C, V));
  return bytes + (size_t{1} << 16);
}

// --- storage helpers -----------------------------------------------------------------
// An activation is stored as act_dtype. In fp32 every helper is a no-op view; in 16 bits
// load() converts into arena scratch and store() rounds into the activation.

void* Gpt::alloc_act(size_t n) { return arena_->alloc_bytes(n * esize()); }

void Gpt::alloc_missing(LayerActs& a, Keep k) {
  const std::array<size_t, 9> sizes = act_sizes(B_, T_);
  const std::array<void**, 9> slots = act_slots(a);
  // A full recompute never rebuilds the output (res3, the last slot).
  const size_t n_slots = k == Keep::input ? slots.size() - 1 : slots.size();
  for (size_t i = 0; i < n_slots; ++i)
    if (*slots[i] == nullptr) *slots[i] = alloc_act(sizes[i]);
  for (float** stat : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd})
    if (*stat == nullptr) *stat = arena_->alloc_floats(size_t(B_) * T_);
}

const float* Gpt::load(const void* act, size_t n) {
  if (!half()) return static_cast<const float*>(act);
  float* buf = arena_->alloc_floats(n);
  widen_to_fp32(opt_.act_dtype, static_cast<const uint16_t*>(act), buf, n);
  return buf;
}

float* Gpt::out_f32(void* act, size_t n) {
  return half() ? arena_->alloc_floats(n) : static_cast<float*>(act);
}

void Gpt::store(void* act, const float* src, size_t n) {
  if (half()) narrow_from_fp32(opt_.act_dtype, src, static_cast<uint16_t*>(act), n);
}

void Gpt::refresh_weights16() {
  weights16_.resize(params_.size());
  narrow_from_fp32(opt_.act_dtype, params_.data(), weights16_.data(), params_.size());
  weights16_stale_ = false;
}

static void* offset(void* act, size_t elems, size_t esize) {
  return static_cast<char*>(act) + elems * esize;
}
static const void* offset(const void* act, size_t elems, size_t esize) {
  return static_cast<const char*>(act) + elems * esize;
}

// --- ops on stored activations ---------------------------------------------------------

// The 16-bit path converts row blocks of this many rows at a time, so its fp32 scratch is
// a block's, never a whole tensor's (the arena peak must show 16-bit storage). Matrix
// products take larger blocks: gemm16 packs the weight operand again for every call.
constexpr int kRowBlock = 256;
constexpr int kGemmRowBlock = 512;

void Gpt::layernorm_fwd(void* out, float* mean, float* rstd, const void* in, size_t w, size_t b) {
  const int N = B_ * T_, C = cfg_.d_model;
  if (!half()) {
    layernorm_forward(static_cast<float*>(out), mean, rstd, static_cast<const float*>(in), p(w),
                      p(b), N, C);
    return;
  }
  for (int r0 = 0; r0 < N; r0 += kRowBlock) {
    const int rows = std::min(kRowBlock, N - r0);
    const size_t at = size_t(r0) * C, n = size_t(rows) * C;
    Scratch s(*arena_);
    const float* x = load(offset(in, at, esize()), n);
    float* y = arena_->alloc_floats(n);
    layernorm_forward(y, mean + r0, rstd + r0, x, p(w), p(b), rows, C);
    store(offset(out, at, esize()), y, n);
  }
}

void Gpt::logits_fwd(float* logits) {
  const int N = B_ * T_, C = cfg_.d_model, V = cfg_.vocab_size;
  if (half())
    gemm16(opt_.act_dtype, false, true, N, V, C, 1.0f, static_cast<const uint16_t*>(lnf_), C,
           p16(wte_), C, 0.0f, logits, V);
  else
    matmul_forward(logits, static_cast<const float*>(lnf_), p(wte_),
                   static_cast<const float*>(nullptr), N, C, V);
}

void Gpt::linear_fwd_act(void* out, const void* in, size_t w, size_t b, int C, int OC,
                         const void* residual) {
  const int N = B_ * T_;
  if (!half()) {
    float* y = static_cast<float*>(out);
    matmul_forward(y, static_cast<const float*>(in), p(w), p(b), N, C, OC);
    if (residual != nullptr)
      residual_forward(y, static_cast<const float*>(residual), y, size_t(N) * OC);
    return;
  }
  for (int r0 = 0; r0 < N; r0 += kGemmRowBlock) {
    const int rows = std::min(kGemmRowBlock, N - r0);
    const size_t n = size_t(rows) * OC;
    Scratch s(*arena_);
    float* y = arena_->alloc_floats(n);
    for (int r = 0; r < rows; ++r) std::memcpy(y + size_t(r) * OC, p(b), OC * sizeof(float));
    gemm16(opt_.act_dtype, false, true, rows, OC, C, 1.0f,
           static_cast<const uint16_t*>(offset(in, size_t(r0) * C, esize())), C, p16(w), C, 1.0f,
           y, OC);
    if (residual != nullptr)
      residual_forward(y, load(offset(residual, size_t(r0) * OC, esize()), n), y, n);
    store(offset(out, size_t(r0) * OC, esize()), y, n);
  }
}

void Gpt::linear_bwd(float* din, size_t w, size_t b, const float* dout, const void* in, int C,
                     int OC) {
  const int N = B_ * T_;
  if (!half()) {
    matmul_backward(din, g(w), b == kNoBias ? nullptr : g(b), dout,
                    static_cast<const float*>(in), p(w), N, C, OC);
    return;
  }
  // The gradient operand is rounded to 16 bits like the activations (in fp16 a value past
  // 65504 becomes inf here, which is what the loss scaler looks for). Row blocks in a fixed
  // order: dweight sums the blocks' products in that order, the same on every call.
  const DType dt = opt_.act_dtype;
  for (int r0 = 0; r0 < N; r0 += kGemmRowBlock) {
    const int rows = std::min(kGemmRowBlock, N - r0);
    const float* dy = dout + size_t(r0) * OC;
    Scratch s(*arena_);
    auto* d16 = static_cast<uint16_t*>(arena_->alloc_bytes(size_t(rows) * OC * sizeof(uint16_t)));
    narrow_from_fp32(dt, dy, d16, size_t(rows) * OC);
    if (din != nullptr)
      gemm16(dt, false, false, rows, C, OC, 1.0f, d16, OC, p16(w), C, 1.0f,
             din + size_t(r0) * C, C);
    gemm16(dt, true, false, OC, C, rows, 1.0f, d16, OC,
           static_cast<const uint16_t*>(offset(in, size_t(r0) * C, esize())), C, 1.0f, g(w), C);
    if (b != kNoBias) {
      float* db = g(b);
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < OC; ++o) db[o] += dy[size_t(r) * OC + o];
    }
  }
}

void Gpt::attention_fwd(void* atty, void* att, const void* qkv) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_heads;
  if (half())
    attention_forward16(opt_.act_dtype, static_cast<uint16_t*>(atty), static_cast<uint16_t*>(att),
                        static_cast<const uint16_t*>(qkv), B, T, C, NH);
  else
    attention_forward(static_cast<float*>(atty), static_cast<float*>(att),
                      static_cast<const float*>(qkv), B, T, C, NH);
}

void Gpt::attention_bwd(float* dqkv, const float* datty, const void* qkv, const void* att) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_heads;
  if (half())
    attention_backward16(opt_.act_dtype, dqkv, datty, static_cast<const uint16_t*>(qkv),
                         static_cast<const uint16_t*>(att), B, T, C, NH);
  else
    attention_backward(dqkv, datty, static_cast<const float*>(qkv), static_cast<const float*>(att),
                       B, T, C, NH);
}

void Gpt::gelu_fwd(void* out, const void* in, size_t n) {
  if (!half()) {
    gelu_forward(static_cast<float*>(out), static_cast<const float*>(in), n);
    return;
  }
  const size_t block = size_t(kRowBlock) * cfg_.d_model;
  for (size_t i = 0; i < n; i += block) {
    const size_t len = std::min(block, n - i);
    Scratch s(*arena_);
    const float* x = load(offset(in, i, esize()), len);
    float* y = arena_->alloc_floats(len);
    gelu_forward(y, x, len);
    store(offset(out, i, esize()), y, len);
  }
}

void Gpt::gelu_bwd(float* d, const void* in, size_t n) {
  if (!half()) {
    gelu_backward_inplace(d, static_cast<const float*>(in), n);
    return;
  }
  const size_t block = size_t(kRowBlock) * cfg_.d_model;
  for (size_t i = 0; i < n; i += block) {
    const size_t len = std::min(block, n - i);
    Scratch s(*arena_);
    gelu_backward_inplace(d + i, load(offset(in, i, esize()), len), len);
  }
}

void Gpt::layernorm_bwd(float* dres, size_t w, size_t b, const float* dout, const void* in,
                        const float* mean, const float* rstd) {
  const int N = B_ * T_, C = cfg_.d_model;
  if (!half()) {
    layernorm_backward(dres, g(w), g(b), dout, static_cast<const float*>(in), p(w), mean, rstd, N,
                       C);
    return;
  }
  // Row blocks in order: dweight and dbias add the rows in the same order as one call.
  for (int r0 = 0; r0 < N; r0 += kRowBlock) {
    const int rows = std::min(kRowBlock, N - r0);
    const size_t at = size_t(r0) * C;
    Scratch s(*arena_);
    layernorm_backward(dres + at, g(w), g(b), dout + at,
                       load(offset(in, at, esize()), size_t(rows) * C), p(w), mean + r0,
                       rstd + r0, rows, C);
  }
}

// --- blocks ------------------------------------------------------------------------------

void Gpt::block_forward(int l, const void* x, LayerActs& a) {
  const Layer& L = layers_[l];
  const int C = cfg_.d_model;
  const size_t NC = size_t(B_) * T_ * C;
  layernorm_fwd(a.ln1, a.ln1_mean, a.ln1_rstd, x, L.ln1_w, L.ln1_b);
  linear_fwd_act(a.qkv, a.ln1, L.qkv_w, L.qkv_b, C, 3 * C, nullptr);
  attention_fwd(a.atty, a.att, a.qkv);
  linear_fwd_act(a.res2, a.atty, L.proj_w, L.proj_b, C, C, x);  // res2 = x + proj(atty)
  layernorm_fwd(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, L.ln2_w, L.ln2_b);
  linear_fwd_act(a.fch, a.ln2, L.fc_w, L.fc_b, C, 4 * C, nullptr);
  gelu_fwd(a.fch_gelu, a.fch, 4 * NC);
  if (a.res3 == nullptr) return;  // full recompute: backward needs everything but the output
  linear_fwd_act(a.res3, a.fch_gelu, L.fcp_w, L.fcp_b, 4 * C, C, a.res2);
}

// Rebuilds the tensors forward did not keep, with the same ops on the same stored inputs,
// so they are bit-identical to the ones a policy of none would have kept.
void Gpt::recompute_block(int l, const void* x, LayerActs& a, Keep k) {
  if (k == Keep::input) {
    block_forward(l, x, a);
    return;
  }
  const Layer& L = layers_[l];
  const size_t NC = size_t(B_) * T_ * cfg_.d_model;
  layernorm_fwd(a.ln1, a.ln1_mean, a.ln1_rstd, x, L.ln1_w, L.ln1_b);
  {
    Scratch s(*arena_);
    void* atty_again = alloc_act(NC);  // the kept attention output is not overwritten
    attention_fwd(atty_again, a.att, a.qkv);
  }
  layernorm_fwd(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, L.ln2_w, L.ln2_b);
  gelu_fwd(a.fch_gelu, a.fch, 4 * NC);
}

void Gpt::block_backward(int l, const void* x, const LayerActs& a, const DBufs& d) {
  const Layer& L = layers_[l];
  const int C = cfg_.d_model;
  const size_t NC = size_t(B_) * T_ * C;
  // res3 = res2 + mlp(ln2(res2)): dres flows to both; the MLP branch adds into dres.
  // d.big holds dGELU, then (in place) dfc, then dqkv | datty.
  float* dh = d.big;
  std::memset(dh, 0, 4 * NC * sizeof(float));
  linear_bwd(dh, L.fcp_w, L.fcp_b, d.dres, a.fch_gelu, 4 * C, C);
  gelu_bwd(dh, a.fch, 4 * NC);
  std::memset(d.dln, 0, NC * sizeof(float));
  linear_bwd(d.dln, L.fc_w, L.fc_b, dh, a.ln2, C, 4 * C);
  layernorm_bwd(d.dres, L.ln2_w, L.ln2_b, d.dln, a.res2, a.ln2_mean, a.ln2_rstd);
  // res2 = x + proj(attn(ln1(x)))
  float* dqkv = d.big;
  float* datty = d.big + 3 * NC;
  std::memset(d.big, 0, 4 * NC * sizeof(float));
  linear_bwd(datty, L.proj_w, L.proj_b, d.dres, a.atty, C, C);
  attention_bwd(dqkv, datty, a.qkv, a.att);
  std::memset(d.dln, 0, NC * sizeof(float));
  linear_bwd(d.dln, L.qkv_w, L.qkv_b, dqkv, a.ln1, C, 3 * C);
  layernorm_bwd(d.dres, L.ln1_w, L.ln1_b, d.dln, x, a.ln1_mean, a.ln1_rstd);
}

float Gpt::forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  return run_forward(inputs, targets, B, T, arena, true);
}

float Gpt::run_forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                       bool for_backward) {
  arena_ = &arena;
  B_ = B;
  T_ = T;
  forward_mark_ = arena.mark();
  inputs_ = inputs;
  targets_ = targets;
  if (half() && weights16_stale_) refresh_weights16();
  const int C = cfg_.d_model, V = cfg_.vocab_size, N = B * T;
  const size_t NC = size_t(N) * C;
  // Backward's fp32 gradient buffers sit below the saved activations, so that backward can
  // pop each block's activations as soon as the block is done (a stack frees only its top).
  d_ = DBufs{};
  if (for_backward) {
    d_.dres = arena.alloc_floats(NC);
    d_.dln = arena.alloc_floats(NC);
    d_.big = arena.alloc_floats(4 * NC);
  }
  encoded_ = alloc_act(NC);
  {
    Scratch s(arena);
    float* y = out_f32(encoded_, NC);
    encoder_forward(y, inputs, p(wte_), p(wpe_), B, T, C);
    store(encoded_, y, NC);
  }
  acts_.assign(cfg_.n_layers, LayerActs{});
  const void* x = encoded_;
  layer_marks_.assign(cfg_.n_layers, 0);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    LayerActs& a = acts_[l];
    const Keep k = keep(l);
    layer_marks_[l] = arena.mark();
    if (k == Keep::all) {
      alloc_missing(a, k);
      block_forward(l, x, a);
    } else {
      // What this block keeps until backward; the rest lives only while the block runs.
      if (k == Keep::selective) {
        a.qkv = alloc_act(3 * NC);
        a.atty = alloc_act(NC);
        a.res2 = alloc_act(NC);
        a.fch = alloc_act(4 * NC);
      }
      a.res3 = alloc_act(NC);
      Scratch s(arena);
      LayerActs t = a;
      alloc_missing(t, Keep::all);
      block_forward(l, x, t);
    }
    x = a.res3;
  }
  head_mark_ = arena.mark();
  lnf_ = alloc_act(NC);
  lnf_mean_ = arena.alloc_floats(N);
  lnf_rstd_ = arena.alloc_floats(N);
  probs_ = arena.alloc_floats(size_t(N) * V);
  losses_ = arena.alloc_floats(N);
  layernorm_fwd(lnf_, lnf_mean_, lnf_rstd_, x, lnf_w_, lnf_b_);
  {
    // Logits and the loss stay fp32 (as under autocast); backward only needs the probabilities.
    Scratch s(arena);
    float* logits = arena.alloc_floats(size_t(N) * V);
    logits_fwd(logits);
    softmax_crossentropy_forward(losses_, probs_, logits, targets, N, V);
  }
  double sum = 0.0;
  for (int n = 0; n < N; ++n) sum += losses_[n];
  return static_cast<float>(sum / N);
}

float Gpt::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  const size_t mark = arena.mark();
  float loss = run_forward(inputs, targets, B, T, arena, false);
  arena.release_to(mark);
  return loss;
}

void Gpt::backward(float dloss_scale, Arena& arena,
                   const std::function<void(int)>& layer_done) {
  if (d_.dres == nullptr) throw std::logic_error("Gpt::backward without a training forward");
  arena_ = &arena;
  recompute_ms_ = 0;
  const int B = B_, T = T_, C = cfg_.d_model, V = cfg_.vocab_size;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  const DBufs& d = d_;
  std::memset(d.dres, 0, NC * sizeof(float));
  {
    float* dlogits = arena.alloc_floats(size_t(N) * V);
    std::memset(dlogits, 0, size_t(N) * V * sizeof(float));
    // Mean over N tokens, times the caller's scale (1/grad_accum_steps, loss scale).
    softmax_crossentropy_backward(dlogits, probs_, targets_, dloss_scale / N, N, V);
    std::memset(d.dln, 0, NC * sizeof(float));
    linear_bwd(d.dln, wte_, kNoBias, dlogits, lnf_, C, V);
    const void* x_last = cfg_.n_layers > 0 ? acts_.back().res3 : encoded_;
    layernorm_bwd(d.dres, lnf_w_, lnf_b_, d.dln, x_last, lnf_mean_, lnf_rstd_);
    arena.release_to(head_mark_);  // final LayerNorm, probabilities, dlogits
  }
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const void* x = l > 0 ? acts_[l - 1].res3 : encoded_;
    const Keep k = keep(l);
    LayerActs a = acts_[l];
    if (k != Keep::all) {
      const int64_t t0 = steady_now_ns();
      if (k == Keep::input) a.res3 = nullptr;  // not needed: skip the last GEMM
      alloc_missing(a, k);
      recompute_block(l, x, a, k);
      recompute_ms_ += double(steady_now_ns() - t0) / 1e6;
    }
    block_backward(l, x, a, d);
    arena.release_to(layer_marks_[l]);  // this block's activations and rebuilt tensors
    if (layer_done) layer_done(l);
  }
  encoder_backward(g(wte_), g(wpe_), d.dres, inputs_, B, T, C);
  if (layer_done) layer_done(-1);
  arena.release_to(forward_mark_);
  d_ = DBufs{};
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
