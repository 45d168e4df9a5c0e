#include "models/gpt_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/op_cost.h"

namespace ringstep {
namespace {

constexpr double kArenaAlign = 64;  // Arena::alloc_bytes rounds every allocation up to this

double arena_round(double bytes) { return std::ceil(bytes / kArenaAlign) * kArenaAlign; }

// The bump allocator's used and peak bytes, replayed (core/arena.h).
struct ArenaReplay {
  double used = 0, peak = 0;
  void alloc(double bytes) {
    used += arena_round(bytes);
    peak = std::max(peak, used);
  }
};

// One block's tensors in registry order: name, shape in units of C ((ROWS C) for a vector,
// (ROWS C, COLS C) for a matrix), weight decay, and the Block field holding its index.
struct BlockTensorShape {
  const char* name;
  int rows, cols;
  bool decay;
  size_t GptSpec::Block::*index;
};
using B = GptSpec::Block;
constexpr BlockTensorShape kBlockLayout[] = {
    {"ln1.weight", 1, 0, false, &B::ln1_w},       {"ln1.bias", 1, 0, false, &B::ln1_b},
    {"attn.qkv.weight", 3, 1, true, &B::qkv_w},   {"attn.qkv.bias", 3, 0, false, &B::qkv_b},
    {"attn.proj.weight", 1, 1, true, &B::proj_w}, {"attn.proj.bias", 1, 0, false, &B::proj_b},
    {"ln2.weight", 1, 0, false, &B::ln2_w},       {"ln2.bias", 1, 0, false, &B::ln2_b},
    {"mlp.fc.weight", 4, 1, true, &B::fc_w},      {"mlp.fc.bias", 4, 0, false, &B::fc_b},
    {"mlp.proj.weight", 1, 4, true, &B::fcp_w},   {"mlp.proj.bias", 1, 0, false, &B::fcp_b},
};

std::vector<int64_t> block_shape(const BlockTensorShape& t, int64_t C) {
  if (t.cols == 0) return {t.rows * C};
  return {t.rows * C, t.cols * C};
}

// Elements of the flat buffer (PADDED: each tensor rounded up to Registry::kAlignElems) or
// parameters, in double.
double layout_elements(const ModelConfig& m, bool padded) {
  const double a = double(Registry::kAlignElems), C = m.d_model;
  auto size = [&](double n) { return padded ? std::ceil(n / a) * a : n; };
  double block = 0;
  for (const BlockTensorShape& t : kBlockLayout)
    block += size(t.rows * C * (t.cols ? t.cols * C : 1));
  return size(double(GptSpec::vocab_rows(m)) * C) + size(double(m.seq_len) * C) +
         m.n_layers * block + 2 * size(C);
}

}  // namespace

BlockKeep block_keep(const GptOptions& opt, int layer) {
  switch (opt.recompute) {
    case RecomputePolicy::none:
      return BlockKeep::all;
    case RecomputePolicy::full:
      return BlockKeep::input;
    case RecomputePolicy::every_k:
      return layer % std::max(1, opt.recompute_k) == 0 ? BlockKeep::input : BlockKeep::all;
    case RecomputePolicy::selective:
      return BlockKeep::selective;
  }
  return BlockKeep::all;
}

GptOptions gpt_options(const Config& cfg) {
  return {cfg.precision.dtype, cfg.recompute.policy, cfg.recompute.k, cfg.precision.tf32};
}

double GptSpec::buffer_elements(const ModelConfig& cfg) { return layout_elements(cfg, true); }

GptSpec::GptSpec(const ModelConfig& cfg) : cfg_(cfg), vocab_rows_(vocab_rows(cfg)) {
  const int64_t V = vocab_rows_, T = cfg.seq_len, C = cfg.d_model;
  const double elements = buffer_elements(cfg);  // before any size_t product can overflow
  if (elements > 9007199254740992.0) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", elements);
    throw InputError(std::string("the model has about ") + n +
                     " parameters, more than 2^53: no machine holds it");
  }
  wte_ = reg_.add("wte", {V, C});
  wpe_ = reg_.add("wpe", {T, C});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    Block b;
    for (const BlockTensorShape& t : kBlockLayout)
      b.*t.index = reg_.add(h + t.name, block_shape(t, C), t.decay);
    blocks_.push_back(b);
  }
  lnf_w_ = reg_.add("lnf.weight", {C}, false);
  lnf_b_ = reg_.add("lnf.bias", {C}, false);
}

size_t GptSpec::flops_param_count() const {
  const size_t padding = size_t(vocab_rows_ - cfg_.vocab_size) * size_t(cfg_.d_model);
  return reg_.param_count() - reg_.at(wpe_).numel - padding;
}

std::pair<size_t, size_t> GptSpec::layer_range(int layer) const {
  const Block& b = block(layer);
  return {reg_.at(b.ln1_w).offset, reg_.at(b.fcp_b).offset + reg_.at(b.fcp_b).numel};
}

std::vector<std::pair<size_t, size_t>> GptSpec::embedding_ranges() const {
  auto range = [&](size_t i) {
    return std::pair<size_t, size_t>{reg_.at(i).offset, reg_.at(i).offset + reg_.at(i).numel};
  };
  return {range(wte_), range(wpe_), {reg_.at(lnf_w_).offset, reg_.total_numel()}};
}

std::vector<std::pair<size_t, size_t>> GptSpec::bucket_units() const {
  const int L = cfg_.n_layers;
  const size_t total = reg_.total_numel();
  std::vector<std::pair<size_t, size_t>> units;
  for (int l = L - 1; l >= 0; --l) {
    auto [begin, end] = layer_range(l);
    if (l == L - 1) end = total;
    if (l > 0) begin = layer_range(l - 1).second;  // padding belongs to the block above
    const size_t mlp = reg_.at(block(l).ln2_w).offset;
    units.push_back({mlp, end});
    units.push_back({begin, mlp});
  }
  units.push_back({0, L > 0 ? layer_range(0).first : total});
  return units;
}

std::vector<std::pair<size_t, Op>> GptSpec::weight_ops() const {
  std::vector<std::pair<size_t, Op>> ops = {{reg_.at(wte_).offset, Op::lm_head}};
  for (const Block& b : blocks_)
    for (auto [w, op] : {std::pair{b.qkv_w, Op::qkv},
                         {b.proj_w, Op::attn_proj},
                         {b.fc_w, Op::mlp_fc},
                         {b.fcp_w, Op::mlp_proj}})
      ops.push_back({reg_.at(w).offset, op});
  return ops;
}

double GptSpec::model_flops_per_token() const {
  const double C = cfg_.d_model, T = cfg_.seq_len;
  return 6.0 * double(flops_param_count()) + 6.0 * cfg_.n_layers * C * T;
}

double GptSpec::recompute_flops_per_token(const GptOptions& opt) const {
  const double C = cfg_.d_model, T = cfg_.seq_len;
  double flops = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    // Forward GEMMs of a block are 2 x (3C^2 + C^2 + 4C^2 + 4C^2) per token and causal
    // attention 2 C T (docs/metrics.md). A full recompute stops before the MLP's output
    // projection (backward does not need the block output); selective redoes attention.
    if (block_keep(opt, l) == BlockKeep::input) flops += 2.0 * 8 * C * C + 2.0 * C * T;
    if (block_keep(opt, l) == BlockKeep::selective) flops += 2.0 * C * T;
  }
  return flops;
}

std::vector<GptProduct> GptSpec::products(int micro_batch) const {
  const int64_t N = int64_t(micro_batch) * cfg_.seq_len, C = cfg_.d_model, T = cfg_.seq_len,
                V = vocab_rows_, L = cfg_.n_layers, H = cfg_.n_heads,
                hd = C / std::max(1, cfg_.n_heads);
  return {
      {"qkv", Op::qkv, N, C, 3 * C, L},
      {"attn proj", Op::attn_proj, N, C, C, L},
      {"mlp fc", Op::mlp_fc, N, C, 4 * C, L},
      {"mlp proj", Op::mlp_proj, N, 4 * C, C, L},
      {"lm head", Op::lm_head, N, C, V, 1},
      {"attn QK^T", Op::attention, T, hd, T, int64_t(micro_batch) * H * L},
      {"attn PV", Op::attention, T, T, hd, int64_t(micro_batch) * H * L},
  };
}

// The calls Gpt::forward and Gpt::backward make (models/gpt.cpp), in their order.
OpProfile GptSpec::step_ops(const GptOptions& opt, Device device, int B, int T,
                            int micro_batches) const {
  OpProfile p;
  const double S = double(dtype_size(opt.act_dtype)), N = double(B) * T, C = cfg_.d_model,
               V = double(vocab_rows_), NH = cfg_.n_heads, NC = N * C;
  const double state = attention_state_bytes(device, opt.act_dtype, B, T, NH);
  OpPhase phase = OpPhase::forward;
  auto add = [&](Op op, const OpCost& c) {
    OpStat& s = p.at(phase, op);
    s.calls += micro_batches, s.flops += micro_batches * c.flops,
        s.bytes += micro_batches * c.bytes;
  };
  // Block forward: all eight ops, or (a full recompute in backward) all but the last.
  auto block_forward = [&](bool with_output) {
    add(Op::layernorm, op_cost::layernorm_forward(N, C, S));
    add(Op::qkv, op_cost::linear_forward(N, C, 3 * C, S, false));
    add(Op::attention, op_cost::attention_forward(B, T, C, NH, S, state));
    add(Op::attn_proj, op_cost::linear_forward(N, C, C, S, true));
    add(Op::layernorm, op_cost::layernorm_forward(N, C, S));
    add(Op::mlp_fc, op_cost::linear_forward(N, C, 4 * C, S, false));
    add(Op::gelu, op_cost::gelu_forward(4 * NC, S));
    if (with_output) add(Op::mlp_proj, op_cost::linear_forward(N, 4 * C, C, S, true));
  };
  add(Op::embedding, op_cost::encoder_forward(NC, S));
  for (int l = 0; l < cfg_.n_layers; ++l) block_forward(true);
  add(Op::layernorm, op_cost::layernorm_forward(N, C, S));
  add(Op::lm_head, op_cost::logits_forward(N, C, V, S));
  add(Op::softmax_xent, op_cost::crossentropy_forward(N, V));

  phase = OpPhase::backward;
  add(Op::zero, op_cost::zero(NC));
  add(Op::softmax_xent, op_cost::crossentropy_backward(N, V));
  add(Op::lm_head, op_cost::linear_backward(N, C, V, S, true, false));
  add(Op::layernorm, op_cost::layernorm_backward(N, C, S));
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const BlockKeep k = block_keep(opt, l);
    if (k == BlockKeep::input) block_forward(false);
    if (k == BlockKeep::selective) {
      add(Op::layernorm, op_cost::layernorm_forward(N, C, S));
      add(Op::attention, op_cost::attention_forward(B, T, C, NH, S, state));
      add(Op::layernorm, op_cost::layernorm_forward(N, C, S));
      add(Op::gelu, op_cost::gelu_forward(4 * NC, S));
    }
    add(Op::mlp_proj, op_cost::linear_backward(N, 4 * C, C, S, true, true));
    add(Op::gelu, op_cost::gelu_backward(4 * NC, S));
    add(Op::mlp_fc, op_cost::linear_backward(N, C, 4 * C, S, true, true));
    add(Op::layernorm, op_cost::layernorm_backward(N, C, S));
    add(Op::attn_proj, op_cost::linear_backward(N, C, C, S, true, true));
    add(Op::zero, op_cost::zero(3 * NC));
    add(Op::attention, op_cost::attention_backward(B, T, C, NH, S, state));
    add(Op::qkv, op_cost::linear_backward(N, C, 3 * C, S, true, true));
    add(Op::layernorm, op_cost::layernorm_backward(N, C, S));
  }
  add(Op::embedding, op_cost::encoder_backward(NC));

  // Once per step: the 16-bit weight copy before the first forward, and the update.
  const double n = double(reg_.total_numel());
  if (opt.act_dtype != DType::f32) {
    const OpCost c = op_cost::cast_weights(n, S);
    OpStat& s = p.at(OpPhase::forward, Op::cast_weights);
    s.calls = 1, s.flops = c.flops, s.bytes = c.bytes;
  }
  const OpCost u = op_cost::optimizer_update(double(param_count()));
  OpStat& s = p.at(OpPhase::optimizer, Op::optimizer);
  s.calls = 1, s.flops = u.flops, s.bytes = u.bytes;
  return p;
}

std::array<BlockTensor, kBlockTensors> GptSpec::block_tensors(const ModelConfig& cfg,
                                                              const GptOptions& opt, Device device,
                                                              double B, double T) {
  const double NC = B * T * cfg.d_model * double(dtype_size(opt.act_dtype));
  const double state = attention_state_bytes(device, opt.act_dtype, B, T, cfg.n_heads);
  constexpr uint8_t kAll = 1 << int(BlockKeep::all);
  constexpr uint8_t kSelective = kAll | 1 << int(BlockKeep::selective);
  constexpr uint8_t kOutput = kSelective | 1 << int(BlockKeep::input);
  return {{{NC, kAll},
           {3 * NC, kSelective},
           {state, kAll},
           {NC, kSelective},
           {NC, kSelective},
           {NC, kAll},
           {4 * NC, kSelective},
           {4 * NC, kAll},
           {NC, kOutput}}};
}

// Gpt::forward then Gpt::backward's allocations, in their order (models/gpt.cpp).
ActivationBytes GptSpec::activations(const ModelConfig& cfg, const GptOptions& opt, Device device,
                                     double B, double T) {
  const double N = B * T, NC = N * cfg.d_model, S = double(dtype_size(opt.act_dtype)),
               NV = N * double(vocab_rows(cfg));
  const auto tensors = block_tensors(cfg, opt, device, B, T);
  // What running (or rebuilding) a block allocates besides what K keeps: the tensors K does
  // not keep but the block output, and the four LayerNorm statistics.
  auto rebuilt = [&](ArenaReplay& a, BlockKeep k) {
    for (const BlockTensor& t : tensors)
      if (!t.kept(k) && !t.kept(BlockKeep::input)) a.alloc(t.bytes);
    for (int i = 0; i < 4; ++i) a.alloc(4 * N);
  };
  ArenaReplay a;
  if (device != Device::cpu) a.alloc(2 * 4 * N);     // the uploaded inputs and targets
  for (double d : {NC, NC, 4 * NC}) a.alloc(4 * d);  // backward's dres, dln, big
  a.alloc(NC * S);                                   // the embedded tokens
  std::vector<double> layer_mark(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const BlockKeep k = block_keep(opt, l);
    layer_mark[size_t(l)] = a.used;
    for (const BlockTensor& t : tensors)
      if (t.kept(k)) a.alloc(t.bytes);
    const double mark = a.used;
    rebuilt(a, k);
    if (k != BlockKeep::all) a.used = mark;  // freed as the block ends
  }
  const double head_mark = a.used;
  for (double b : {NC * S, 4 * N, 4 * N, 4 * NV, 4 * N}) a.alloc(b);  // lnf, stats, probs, losses
  const double saved = a.used;
  a.alloc(4 * NV);  // the logits in forward, then dlogits in backward
  a.used = head_mark;
  for (int l = cfg.n_layers - 1; l >= 0; --l) {
    const BlockKeep k = block_keep(opt, l);
    if (k != BlockKeep::all) rebuilt(a, k);
    if (k == BlockKeep::selective) a.alloc(NC * S);  // attention's output, rebuilt aside
    a.used = layer_mark[size_t(l)];
  }
  return {saved, a.peak};
}

}  // namespace ringstep
