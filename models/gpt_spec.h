// The GPT's shapes as one pure function of its config (llm.c's fill_in_*_sizes, complete):
// the parameter tensors with their aligned offsets, the units gradient buckets are made of,
// every op of a training step with its FLOPs and bytes (core/op_cost.h), and the activation
// arena a micro-batch needs under each recompute policy. Gpt allocates what the spec lays
// out; GradSync, the preflight, the dry run, the report and `ringstep plan` read it. No other
// file does shape arithmetic, so a change to the model is one change here.
//
// Sizes in double are exact integers (below 2^53) and cannot overflow for an absurd config;
// element offsets are size_t, as the registry's. Immutable once built.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/op_profile.h"
#include "core/registry.h"

namespace ringstep {

struct GptOptions {
  DType act_dtype = DType::f32;  // storage of saved activations: f32, bf16 or f16
  RecomputePolicy recompute = RecomputePolicy::none;
  int recompute_k = 2;  // every_k: blocks whose index is a multiple of k are recomputed
  bool tf32 = false;    // cuda: fp32 products may use TF32 (precision.tf32)
};

// What a block keeps until backward: everything, only its output (a full recompute rebuilds
// the rest from the input), or the matrix products' outputs and its output (selective).
enum class BlockKeep : uint8_t { all, input, selective };
BlockKeep block_keep(const GptOptions& opt, int layer);

// One tensor a block saves in forward: its bytes and the BlockKeep values that keep it
// until backward (bit int(k)).
struct BlockTensor {
  double bytes = 0;
  uint8_t kept_by = 0;
  bool kept(BlockKeep k) const { return (kept_by >> int(k)) & 1; }
};
// A block's saved tensors, in this order (x (B, T, C) being the block's input):
// ln1(x), qkv (3C), attention's state (the backend's format), attention output, res2 = x +
// proj, ln2(res2), fc (4C), gelu(fc) (4C), res3 = the block output.
inline constexpr size_t kBlockTensors = 9;
inline constexpr size_t kAttentionStateTensor = 2;  // its index in that order

// The activation arena of one B x T micro-batch (Gpt::forward + backward), in bytes, each
// allocation rounded to the arena's 64 bytes: on a device whose memory is not the host's
// (cuda), the uploaded inputs and targets too, and attention's state in the device
// backend's format (attention_state_bytes, core/backend.h).
struct ActivationBytes {
  double saved = 0;  // held from the end of forward until backward starts
  double peak = 0;   // the most held at once, without the backend's scratch (none in fp32
                     // on the CPU; 16-bit row blocks otherwise)
};

// One matrix product of a micro-batch's forward: (m x k) times (k x n), COUNT times.
struct GptProduct {
  const char* name;
  Op op;
  int64_t m, k, n, count;
};

class GptSpec {
 public:
  // InputError when the model has more elements than a double counts exactly (2^53).
  explicit GptSpec(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  // Rows of the token embedding and the logits: the vocabulary rounded up to a multiple of
  // model.pad_vocab_to_multiple (the one place that pads it). The padded rows are zero and
  // their logits -inf (Backend::logits_forward).
  static int64_t vocab_rows(const ModelConfig& cfg) {
    const int64_t m = std::max(1, cfg.pad_vocab_to_multiple);
    return (int64_t(cfg.vocab_size) + m - 1) / m * m;
  }
  int64_t vocab_rows() const { return vocab_rows_; }

  // --- parameters ---
  // Order: wte, wpe, blocks 0..L-1 each contiguous, lnf (docs/formats.md); every offset
  // aligned to Registry::kAlignElems.
  const Registry& registry() const { return reg_; }
  struct Block {  // registry indices of one block's tensors
    size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcp_w, fcp_b;
  };
  const Block& block(int layer) const { return blocks_[size_t(layer)]; }
  size_t wte() const { return wte_; }
  size_t wpe() const { return wpe_; }
  size_t lnf_w() const { return lnf_w_; }
  size_t lnf_b() const { return lnf_b_; }
  size_t param_count() const { return reg_.param_count(); }
  // N of the FLOPs formula: parameters without the position embeddings and without the
  // vocabulary's padded rows (work, but not the model's).
  size_t flops_param_count() const;
  // The contiguous [begin, end) element range of block L's parameters.
  std::pair<size_t, size_t> layer_range(int layer) const;
  // wte, wpe and the final LayerNorm (with the padding to the buffer's end).
  std::vector<std::pair<size_t, size_t>> embedding_ranges() const;
  // The gradient buffer cut in the order backward finishes it, each unit just below the
  // previous one and together the whole buffer, padding included. Each block is two units,
  // as its backward finishes them: its MLP half (ln2, fc, the MLP's projection; the last
  // block's also holds the final LayerNorm, done even earlier), then its attention half
  // (ln1, qkv, attention's projection, and the padding between the block and the one
  // below). The last unit holds the embeddings (wte is final only at the end).
  std::vector<std::pair<size_t, size_t>> bucket_units() const;
  // Indices into bucket_units(): block LAYER's halves, and the embeddings'.
  static constexpr int kUnitsPerBlock = 2;  // its MLP half, then its attention half
  int mlp_unit(int layer) const { return kUnitsPerBlock * (cfg_.n_layers - 1 - layer); }
  int attention_unit(int layer) const { return mlp_unit(layer) + 1; }
  int embedding_unit() const { return kUnitsPerBlock * cfg_.n_layers; }
  // Each matrix product's weight offset and the op it is timed as (core/timed_backend.h).
  std::vector<std::pair<size_t, Op>> weight_ops() const;

  // --- FLOPs ---
  // Model FLOPs per token, 6 N + 6 L C T (causal attention counted once; docs/metrics.md).
  double model_flops_per_token() const;
  // Forward FLOPs per token that backward repeats under OPT's recompute policy (for HFU).
  double recompute_flops_per_token(const GptOptions& opt) const;
  // The forward matrix products of a micro-batch of MICRO_BATCH full sequences (attention's
  // two per (sequence, head) shown as full T x T products).
  std::vector<GptProduct> products(int micro_batch) const;
  // Calls, FLOPs and bytes (ms = 0) of every op of one optimizer step on one rank:
  // MICRO_BATCHES forward + backward passes of B x T on DEVICE, the weights' cast once (a
  // 16-bit backend) and the update, exactly as the timed backend records them.
  OpProfile step_ops(const GptOptions& opt, Device device, int B, int T, int micro_batches) const;

  // --- activations ---
  // A block's saved tensors for a B x T micro-batch, in kBlockTensors order.
  std::array<BlockTensor, kBlockTensors> block_tensors(const GptOptions& opt, Device device,
                                                       double B, double T) const {
    return block_tensors(cfg_, opt, device, B, T);
  }
  ActivationBytes activations(const GptOptions& opt, Device device, double B, double T) const {
    return activations(cfg_, opt, device, B, T);
  }
  // The same, and the flat buffer's length (registry().total_numel()), for a config whose
  // spec is not built: no registry, so an absurd config is sized at once.
  static std::array<BlockTensor, kBlockTensors> block_tensors(const ModelConfig& cfg,
                                                              const GptOptions& opt, Device device,
                                                              double B, double T);
  static ActivationBytes activations(const ModelConfig& cfg, const GptOptions& opt, Device device,
                                     double B, double T);
  static double buffer_elements(const ModelConfig& cfg);

 private:
  ModelConfig cfg_;
  int64_t vocab_rows_ = 0;
  Registry reg_;
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;
};

// GptOptions of a loaded config (precision.dtype, recompute.*, precision.tf32).
GptOptions gpt_options(const Config& cfg);

}  // namespace ringstep
