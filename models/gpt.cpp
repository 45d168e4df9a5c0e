#include "models/gpt.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/timed_backend.h"

namespace ringstep {

// Pinned host memory for a micro-batch's inputs and targets, and its upload in flight.
struct Gpt::TokenStage {
  Runtime& rt;
  std::vector<int32_t> host;
  std::shared_ptr<CopyInFlight> upload;
  explicit TokenStage(Runtime& r) : rt(r) {}
  ~TokenStage() { release(); }
  TokenStage(const TokenStage&) = delete;
  TokenStage& operator=(const TokenStage&) = delete;
  void wait() {
    if (upload) upload->wait();
    upload.reset();
  }
  void release() noexcept {
    wait();
    if (!host.empty()) rt.unpin_host(host.data());
  }
  // Room for N ints, pinned; waits for the last upload first.
  int32_t* reserve(size_t n) {
    wait();
    if (host.size() < n) {
      release();
      host.assign(n, 0);
      rt.pin_host(host.data(), n * sizeof(int32_t));
    }
    return host.data();
  }
};

Gpt::Gpt(const ModelConfig& cfg, const GptOptions& opt, Device device)
    : Gpt(cfg, opt, runtime(device, "backend")) {}

Gpt::Gpt(const ModelConfig& cfg, const GptOptions& opt, Runtime& rt)
    : spec_(cfg), opt_(opt), backend_(rt.make_backend(opt.act_dtype, opt.tf32)) {
  if (opt_.recompute_k < 1) throw InputError("recompute.k must be >= 1");
  params_ = FlatBuffer(registry().total_numel(), rt);
  grads_ = FlatBuffer(registry().total_numel(), rt);
  scalars_ = FlatBuffer(4, rt);
  if (!rt.host_memory()) stage_ = std::make_unique<TokenStage>(rt);
  // Each matrix product is timed under the name of its weight.
  backend_ = std::make_unique<TimedBackend>(std::move(backend_), op_clock_, spec_.weight_ops());
  // On a device the ops are timed on its compute stream (the clock's marks grow on demand).
  op_clock_.time_on_device(params_.runtime().make_clock(256));
}

Gpt::~Gpt() = default;
Gpt::Gpt(Gpt&&) noexcept = default;
Gpt& Gpt::operator=(Gpt&&) noexcept = default;

void Gpt::init(uint64_t seed) {
  if (!params_.runtime().host_memory()) {  // initialise on the host, then one copy
    FlatBuffer host(params_.size());
    init_host(host, seed);
    copy_buffer(params_, host);
    weights_stale_ = true;
    return;
  }
  init_host(params_, seed);
}

void Gpt::init_host(FlatBuffer& params, uint64_t seed) const {
  params.zero();
  const float residual_std = 0.02f / std::sqrt(2.0f * config().n_layers);
  for (size_t i = 0; i < registry().size(); ++i) {
    const TensorInfo& t = registry().at(i);
    float* w = params.at(t);
    const bool is_ln_weight =
        t.name.find("ln") != std::string::npos && t.name.find(".weight") != std::string::npos;
    if (is_ln_weight) {
      for (size_t k = 0; k < t.numel; ++k) w[k] = 1.0f;
    } else if (t.shape.size() == 2) {
      const bool residual_out = t.name.find("proj.weight") != std::string::npos;
      // The vocabulary's padded rows (the end of wte) stay zero.
      const size_t n = i == spec_.wte() ? size_t(config().vocab_size) * t.shape[1] : t.numel;
      fill_normal(w, n, residual_out ? residual_std : 0.02f, seed, i);
    }
  }
}

std::array<Gpt::ActSlot, kBlockTensors> Gpt::slots(LayerActs& a) const {
  auto t = spec_.block_tensors(opt_, backend_->device(), B_, T_);
  t[kAttentionStateTensor].bytes =
      double(backend_->attention_state_bytes(B_, T_, config().n_heads));
  const std::array<void**, kBlockTensors> ptrs = {&a.ln1, &a.qkv, &a.att_state, &a.atty, &a.res2,
                                                  &a.ln2, &a.fch, &a.fch_gelu,  &a.res3};
  std::array<ActSlot, kBlockTensors> out;
  for (size_t i = 0; i < kBlockTensors; ++i) out[i] = {ptrs[i], size_t(t[i].bytes), t[i].kept_by};
  return out;
}

void* Gpt::alloc_act(size_t n) { return arena_->alloc_bytes(n * dtype_size(opt_.act_dtype)); }

void Gpt::alloc_kept(LayerActs& a, Keep k) {
  for (const ActSlot& s : slots(a))
    if (s.kept(k)) *s.ptr = arena_->alloc_bytes(s.bytes);
}

void Gpt::alloc_rebuilt(LayerActs& a) {
  // The block output is never rebuilt: a full recompute stops before it (backward does not
  // need it), and every other policy keeps it.
  for (const ActSlot& s : slots(a))
    if (*s.ptr == nullptr && !s.kept(Keep::input)) *s.ptr = arena_->alloc_bytes(s.bytes);
  for (float** stat : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd})
    if (*stat == nullptr) *stat = arena_->alloc_floats(size_t(B_) * T_);
}

// --- blocks ------------------------------------------------------------------------------

void Gpt::block_forward(int l, const void* x, LayerActs& a) {
  const Layer& L = layer(l);
  const int N = B_ * T_, C = config().d_model, NH = config().n_heads;
  Backend& be = *backend_;
  Arena& ar = *arena_;
  be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p(L.ln1_w), p(L.ln1_b), N, C, ar);
  be.linear_forward(a.qkv, a.ln1, p(L.qkv_w), p(L.qkv_b), nullptr, N, C, 3 * C, ar);
  be.attention_forward(a.atty, a.att_state, a.qkv, B_, T_, C, NH, ar);
  be.linear_forward(a.res2, a.atty, p(L.proj_w), p(L.proj_b), x, N, C, C, ar);
  be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p(L.ln2_w), p(L.ln2_b), N, C, ar);
  if (keep(l) == Keep::selective) {
    // Backward rebuilds fch_gelu from the kept fch with gelu_forward alone: the first
    // forward does the same, so that both give the same bits (Backend::linear_gelu_forward).
    be.linear_forward(a.fch, a.ln2, p(L.fc_w), p(L.fc_b), nullptr, N, C, 4 * C, ar);
    const auto [rows, cols] = gelu_view(N, 4 * C, C);
    be.gelu_forward(a.fch_gelu, a.fch, rows, cols, ar);
  } else {
    be.linear_gelu_forward(a.fch_gelu, a.fch, a.ln2, p(L.fc_w), p(L.fc_b), N, C, 4 * C, ar);
  }
  if (a.res3 == nullptr) return;  // full recompute: backward needs everything but the output
  be.linear_forward(a.res3, a.fch_gelu, p(L.fcp_w), p(L.fcp_b), a.res2, N, 4 * C, C, ar);
}

// Rebuilds the tensors forward did not keep, with the same ops on the same stored inputs,
// so they are bit-identical to the ones a policy of none would have kept.
void Gpt::recompute_block(int l, const void* x, LayerActs& a, Keep k) {
  if (k == Keep::input) {
    block_forward(l, x, a);
    return;
  }
  const Layer& L = layer(l);
  const int N = B_ * T_, C = config().d_model, NH = config().n_heads;
  Backend& be = *backend_;
  Arena& ar = *arena_;
  be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p(L.ln1_w), p(L.ln1_b), N, C, ar);
  {
    ArenaScope scope(ar);
    void* atty_again = alloc_act(size_t(N) * C);  // the kept attention output is not overwritten
    be.attention_forward(atty_again, a.att_state, a.qkv, B_, T_, C, NH, ar);
  }
  be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p(L.ln2_w), p(L.ln2_b), N, C, ar);
  const auto [rows, cols] = gelu_view(N, 4 * C, C);
  be.gelu_forward(a.fch_gelu, a.fch, rows, cols, ar);
}

void Gpt::block_backward(int l, const void* x, const LayerActs& a, const DBufs& d,
                         const std::function<void(int unit)>& unit_done) {
  const Layer& L = layer(l);
  const int N = B_ * T_, C = config().d_model, NH = config().n_heads;
  const size_t NC = size_t(N) * C;
  Backend& be = *backend_;
  Arena& ar = *arena_;
  // res3 = res2 + mlp(ln2(res2)): dres flows to both; the MLP branch adds into dres.
  float* dh = d.big;
  be.linear_backward_gelu(dh, g(L.fcp_w), g(L.fcp_b), d.dres, a.fch_gelu, p(L.fcp_w), a.fch, N,
                          4 * C, C, ar);
  be.linear_backward(d.dln, g(L.fc_w), g(L.fc_b), dh, a.ln2, p(L.fc_w), N, C, 4 * C, ar);
  be.layernorm_backward(d.dres, g(L.ln2_w), g(L.ln2_b), d.dln, a.res2, p(L.ln2_w), a.ln2_mean,
                        a.ln2_rstd, N, C, ar);
  if (unit_done) unit_done(spec_.mlp_unit(l));
  // res2 = x + proj(attn(ln1(x)))
  float* dqkv = d.big;
  float* datty = d.big + 3 * NC;
  be.linear_backward(datty, g(L.proj_w), g(L.proj_b), d.dres, a.atty, p(L.proj_w), N, C, C, ar);
  be.zero(dqkv, 3 * NC, ar);  // attention backward adds into it; the linears write theirs
  be.attention_backward(dqkv, datty, a.qkv, a.atty, a.att_state, B_, T_, C, NH, ar);
  be.linear_backward(d.dln, g(L.qkv_w), g(L.qkv_b), dqkv, a.ln1, p(L.qkv_w), N, C, 3 * C, ar);
  be.layernorm_backward(d.dres, g(L.ln1_w), g(L.ln1_b), d.dln, x, p(L.ln1_w), a.ln1_mean,
                        a.ln1_rstd, N, C, ar);
  if (unit_done) unit_done(spec_.attention_unit(l));
}

// --- the model ---------------------------------------------------------------------------

float Gpt::forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  return forward_loss(inputs, targets, B, T, arena, true);
}

float Gpt::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                        bool for_backward) {
  Runtime& rt = scalars_.runtime();
  rt.zero(loss_slot(), sizeof(double));
  run_forward(inputs, targets, B, T, arena, for_backward, loss_slot());
  double loss = 0;
  if (!arena.counting()) rt.copy(&loss, loss_slot(), sizeof loss);
  return float(loss);
}

void Gpt::forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                  double* loss_sum) {
  run_forward(inputs, targets, B, T, arena, true, loss_sum);
}

void Gpt::run_forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                      bool for_backward, double* loss_sum) {
  arena_ = &arena;
  B_ = B;
  T_ = T;
  forward_mark_ = arena.mark();
  const int C = config().d_model, N = B * T;
  if (stage_) {  // the backend reads the arena's copies
    auto* dev = static_cast<int32_t*>(arena.alloc_bytes(2 * size_t(N) * sizeof(int32_t)));
    if (!arena.counting()) upload_tokens(dev, inputs, targets, size_t(N));
    inputs = dev;
    targets = dev + N;
  }
  inputs_ = inputs;
  targets_ = targets;
  if (weights_stale_ && !arena.counting()) {
    backend_->set_weights(params_.data(), params_.size());
    weights_stale_ = false;
  }
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
  backend_->encoder_forward(encoded_, inputs_, p(spec_.wte()), p(spec_.wpe()), B, T, C, arena);
  acts_.assign(config().n_layers, LayerActs{});
  layer_marks_.assign(config().n_layers, 0);
  const void* x = encoded_;
  for (int l = 0; l < config().n_layers; ++l) {
    LayerActs& a = acts_[l];
    const Keep k = keep(l);
    layer_marks_[l] = arena.mark();
    alloc_kept(a, k);
    if (k == Keep::all) {
      alloc_rebuilt(a);
      block_forward(l, x, a);
    } else {
      ArenaScope scope(arena);  // what the block does not keep lives only while it runs
      LayerActs t = a;
      alloc_rebuilt(t);
      block_forward(l, x, t);
    }
    x = a.res3;
  }
  head_forward(x, loss_sum);
}

void Gpt::upload_tokens(int32_t* dev, const int32_t* inputs, const int32_t* targets, size_t N) {
  int32_t* host = stage_->reserve(2 * N);
  std::copy(inputs, inputs + N, host);
  std::copy(targets, targets + N, host + N);
  stage_->upload = stage_->rt.upload(dev, host, 2 * N * sizeof(int32_t));
}

void Gpt::head_forward(const void* x, double* loss_sum) {
  Arena& arena = *arena_;
  const int N = B_ * T_, C = config().d_model, V = int(spec_.vocab_rows());
  head_mark_ = arena.mark();
  lnf_ = alloc_act(size_t(N) * C);
  lnf_mean_ = arena.alloc_floats(N);
  lnf_rstd_ = arena.alloc_floats(N);
  probs_ = arena.alloc_floats(size_t(N) * V);
  losses_ = arena.alloc_floats(N);
  backend_->layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, p(spec_.lnf_w()), p(spec_.lnf_b()), N,
                              C, arena);
  // Logits and the loss stay fp32 (as under autocast); backward only needs the probabilities.
  ArenaScope scope(arena);
  float* logits = arena.alloc_floats(size_t(N) * V);
  backend_->logits_forward(logits, lnf_, p(spec_.wte()), N, C, V, config().vocab_size, arena);
  backend_->crossentropy_forward(losses_, probs_, logits, targets_, N, V, loss_sum, arena);
}

float Gpt::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena) {
  const size_t mark = arena.mark();
  const float loss = forward_loss(inputs, targets, B, T, arena, false);
  arena.release_to(mark);
  return loss;
}

void Gpt::head_backward(const float* dloss_scale) {
  Arena& arena = *arena_;
  Backend& be = *backend_;
  const int N = B_ * T_, C = config().d_model, V = int(spec_.vocab_rows());
  float* dlogits = arena.alloc_floats(size_t(N) * V);
  // Mean over N tokens, times the caller's scale (1/grad_accum_steps, loss scale).
  be.crossentropy_backward(dlogits, probs_, targets_, dloss_scale, N, V, arena);
  be.linear_backward(d_.dln, g(spec_.wte()), nullptr, dlogits, lnf_, p(spec_.wte()), N, C, V,
                     arena);
  const void* x_last = config().n_layers > 0 ? acts_.back().res3 : encoded_;
  be.layernorm_backward(d_.dres, g(spec_.lnf_w()), g(spec_.lnf_b()), d_.dln, x_last,
                        p(spec_.lnf_w()), lnf_mean_, lnf_rstd_, N, C, arena);
  arena.release_to(head_mark_);  // final LayerNorm, probabilities, dlogits
}

void Gpt::backward(float dloss_scale, Arena& arena, const std::function<void(int)>& unit_done) {
  if (!(dloss_scale == seed_in_slot_)) {  // a copy into a device's memory waits for it
    scalars_.runtime().copy(seed_slot(), &dloss_scale, sizeof dloss_scale);
    seed_in_slot_ = dloss_scale;
  }
  backward(seed_slot(), arena, unit_done);
}

void Gpt::backward(const float* dloss_scale, Arena& arena,
                   const std::function<void(int)>& unit_done) {
  if (d_.dres == nullptr) throw std::logic_error("Gpt::backward without a training forward");
  arena_ = &arena;
  recompute_ms_ = 0;
  backend_->zero(d_.dres, size_t(B_) * T_ * config().d_model, arena);
  head_backward(dloss_scale);
  for (int l = config().n_layers - 1; l >= 0; --l) {
    const void* x = l > 0 ? acts_[l - 1].res3 : encoded_;
    const Keep k = keep(l);
    LayerActs a = acts_[l];
    if (k != Keep::all) {
      const int64_t t0 = steady_now_ns();
      if (k == Keep::input) a.res3 = nullptr;  // not needed: skip the last GEMM
      alloc_rebuilt(a);
      recompute_block(l, x, a, k);
      recompute_ms_ += double(steady_now_ns() - t0) / 1e6;
    }
    block_backward(l, x, a, d_, unit_done);
    arena.release_to(layer_marks_[l]);  // this block's activations and rebuilt tensors
  }
  backend_->encoder_backward(g(spec_.wte()), g(spec_.wpe()), d_.dres, inputs_, B_, T_,
                             config().d_model, arena);
  if (unit_done) unit_done(spec_.embedding_unit());
  arena.release_to(forward_mark_);
  d_ = DBufs{};
}

size_t Gpt::count_arena_bytes(int B, int T) {
  if (d_.dres != nullptr)
    throw std::logic_error("Gpt::count_arena_bytes between forward and backward");
  const double recompute_ms = recompute_ms_;
  Arena counter = Arena::make_counting();
  forward(nullptr, nullptr, B, T, counter);
  backward(1.0f, counter);
  recompute_ms_ = recompute_ms;
  return counter.peak_bytes();
}

}  // namespace ringstep
