// The GPT-2 style decoder: token + learned position embeddings, n_layers pre-LayerNorm
// blocks (causal multi-head attention with fused QKV, 4x MLP with tanh-GELU, residuals),
// a final LayerNorm and an LM head tied to the token embedding. All parameters live in one
// flat buffer laid out by one registry (docs/formats.md lists the order); gradients live
// in a second buffer with the same layout. forward() saves activations in the caller's
// arena; backward() adds into the gradient buffer and reports each finished unit (half a
// block) so the trainer can start reducing it while earlier layers are still computing.
//
// Every op on activations runs on the model's Backend (core/backend.h), which owns how
// activations are stored and computed. Precision (docs/precision.md): parameters,
// gradients and optimizer state are fp32; with a 16-bit activation dtype every saved
// activation is stored in 16 bits and every consumer reads the stored (rounded) value, so
// a recomputed forward is bit-identical to the first one.
//
// The layout, the saved tensors' sizes and every op's cost come from the model's GptSpec
// (models/gpt_spec.h). Recomputation: a block is kept whole, or keeps only its input (full),
// or keeps its matrix products' outputs (selective); backward rebuilds what is missing one
// block at a time.
// One Gpt per training thread; not thread-safe.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/op_profile.h"
#include "core/registry.h"
#include "models/gpt_spec.h"

namespace ringstep {

class Gpt {
 public:
  // Parameters, gradients, activations and the ops on them live on DEVICE, through
  // make_backend(DEVICE, opt.act_dtype, opt.tf32) (InputError for a device this build or
  // machine lacks). On cuda, forward's arena must be a cuda arena and inputs/targets stay
  // host memory: forward uploads them once (below).
  explicit Gpt(const ModelConfig& cfg, const GptOptions& opt = {}, Device device = Device::cpu);
  // The same on RT's memory with RT's backend (a test's own runtime).
  Gpt(const ModelConfig& cfg, const GptOptions& opt, Runtime& rt);
  ~Gpt();
  Gpt(Gpt&&) noexcept;
  Gpt& operator=(Gpt&&) noexcept;

  const ModelConfig& config() const { return spec_.config(); }
  const GptSpec& spec() const { return spec_; }
  const Registry& registry() const { return spec_.registry(); }
  const GptOptions& options() const { return opt_; }
  // Mutable access marks the backend's copy of the weights stale; the next forward
  // refreshes it (Backend::set_weights).
  FlatBuffer& params() {
    weights_stale_ = true;
    return params_;
  }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() { return grads_; }

  // GPT-2 initialisation: weights N(0, 0.02), the two residual output projections
  // N(0, 0.02/sqrt(2 n_layers)), biases 0, LayerNorm weights 1. Same seed, same weights.
  void init(uint64_t seed);

  // Runs the model on inputs/targets [B, T] (T <= seq_len), host memory, and returns the
  // mean loss. Saved activations are carved from ARENA, which must stay untouched until
  // backward(). Where the parameters' runtime is not host memory, inputs and targets are
  // copied into one pinned host buffer and uploaded with one Runtime::upload into the arena,
  // where the backend's ops read them; the call returns before that copy is done (the next
  // forward waits for it before refilling the buffer).
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena);
  // The same, but the mean loss (as a float) is added into *LOSS_SUM, in the parameters'
  // runtime's memory, and nothing waits for it (a device's step reads it later).
  void forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
               double* loss_sum);
  // Loss only (evaluation); activations are released before returning.
  float evaluate(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena);

  // Adds d(dloss_scale * mean loss)/d(params) into grads(). UNIT_DONE(u) is called once the
  // gradients of unit u of spec().bucket_units() are final, for u = 0, 1, ... in order: each
  // block's MLP half, then its attention half, from the last block down, then the embeddings.
  void backward(float dloss_scale, Arena& arena,
                const std::function<void(int unit)>& unit_done = nullptr);
  // The same with the seed *DLOSS_SCALE in the parameters' runtime's memory (decided there).
  void backward(const float* dloss_scale, Arena& arena,
                const std::function<void(int unit)>& unit_done = nullptr);

  // Bytes of arena the forward + backward (or evaluate) of one B x T micro-batch needs,
  // exactly: runs them on a counting arena (core/arena.h), making every allocation, the
  // backend's scratch included, and no compute. Parameters and gradients are untouched.
  // std::logic_error between forward() and backward().
  size_t count_arena_bytes(int B, int T);
  // The clock of the backend's ops (core/timed_backend.h): start it to time each op of a
  // forward or backward into an OpProfile.
  OpClock& op_clock() { return op_clock_; }
  // Milliseconds the last backward() spent recomputing activations (0 with policy none).
  double last_recompute_ms() const { return recompute_ms_; }
  // Forward FLOPs per token that backward repeats under the recompute policy (for HFU).
  double recompute_flops_per_token() const { return spec_.recompute_flops_per_token(opt_); }
  // Blocks whose activations are not all kept by forward.
  bool layer_recomputed(int layer) const { return keep(layer) != BlockKeep::all; }

  size_t param_count() const { return spec_.param_count(); }
  // Bytes the backend holds for its copies of the weights (Backend::weight_copy_bytes).
  size_t weight_copy_bytes() const { return backend_->weight_copy_bytes(params_.size()); }
  // Model FLOPs per token, 6 N + 6 L C T (causal attention counted once).
  double model_flops_per_token() const { return spec_.model_flops_per_token(); }

 private:
  using Layer = GptSpec::Block;
  // A block's saved tensors, x (B, T, C) being its input. The void* ones hold act_dtype
  // values, but for the attention state (in the backend's format); the LayerNorm statistics
  // are fp32. Null = not kept (rebuilt by backward).
  struct LayerActs {
    void* ln1 = nullptr;        // (B, T, C)      ln1(x)
    void* qkv = nullptr;        // (B, T, 3C)     q | k | v
    void* att_state = nullptr;  // what attention saves (Backend::attention_state_bytes)
    void* atty = nullptr;       // (B, T, C)      attention output, heads side by side
    void* res2 = nullptr;       // (B, T, C)      x + proj(atty)
    void* ln2 = nullptr;        // (B, T, C)      ln2(res2)
    void* fch = nullptr;        // (B, T, 4C)     fc(ln2)
    void* fch_gelu = nullptr;   // (B, T, 4C)     gelu(fch)
    void* res3 = nullptr;       // (B, T, C)      res2 + fcp(fch_gelu): the block output
    float* ln1_mean = nullptr;  // (B, T)
    float* ln1_rstd = nullptr;  // (B, T)
    float* ln2_mean = nullptr;  // (B, T)
    float* ln2_rstd = nullptr;  // (B, T)
  };
  using Keep = BlockKeep;
  // One void* tensor of LayerActs: its pointer and the spec's size and keep mask.
  struct ActSlot {
    void** ptr;
    size_t bytes;
    uint8_t kept_by;
    bool kept(Keep k) const { return (kept_by >> int(k)) & 1; }
  };
  Keep keep(int layer) const { return block_keep(opt_, layer); }
  void init_host(FlatBuffer& params, uint64_t seed) const;  // init() on host memory
  const float* p(size_t i) const { return params_.data() + registry().at(i).offset; }
  float* g(size_t i) { return grads_.data() + registry().at(i).offset; }
  const Layer& layer(int l) const { return spec_.block(l); }

  // The one list of a block's void* tensors, for the current B and T.
  std::array<ActSlot, kBlockTensors> slots(LayerActs& a) const;
  void* alloc_act(size_t n);  // N act_dtype values
  // Allocates the tensors policy K keeps until backward.
  void alloc_kept(LayerActs& a, Keep k);
  // Allocates the tensors still null but the block output, and the LayerNorm statistics:
  // what running (or rebuilding) the block needs besides what it keeps.
  void alloc_rebuilt(LayerActs& a);

  // Backward's fp32 buffers for gradients w.r.t. activations.
  struct DBufs {
    float* dres;  // (B, T, C)   the residual stream's gradient
    float* dln;   // (B, T, C)   a LayerNorm output's gradient
    float* big;   // (B, T, 4C)  dGELU, then (in place) dfc, then dqkv | datty
  };
  void run_forward(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                   bool for_backward, double* loss_sum);
  // run_forward into loss_slot(), then the mean loss read back (waiting for the device).
  float forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T, Arena& arena,
                     bool for_backward);
  void block_forward(int l, const void* x, LayerActs& a);
  void recompute_block(int l, const void* x, LayerActs& a, Keep k);
  // Calls UNIT_DONE between its MLP half and its attention half, and after the latter.
  void block_backward(int l, const void* x, const LayerActs& a, const DBufs& d,
                      const std::function<void(int unit)>& unit_done);
  // The final LayerNorm, logits and loss on the last block's output X; adds the mean loss
  // into *LOSS_SUM (runtime memory).
  void head_forward(const void* x, double* loss_sum);
  void head_backward(const float* dloss_scale);
  // The loss and seed of the host-valued forward() and backward(), in the runtime's memory:
  // scalars_ holds a double (the loss's sum) then a float (the seed).
  double* loss_slot() { return reinterpret_cast<double*>(scalars_.data()); }
  float* seed_slot() { return scalars_.data() + 2; }

  GptSpec spec_;
  GptOptions opt_;
  FlatBuffer params_, grads_;
  FlatBuffer scalars_;        // loss_slot() and seed_slot()
  float seed_in_slot_ = NAN;  // what seed_slot() holds (NaN: nothing yet)
  OpClock op_clock_;
  std::unique_ptr<Backend> backend_;  // a TimedBackend on op_clock_
  bool weights_stale_ = true;         // params_ changed since the last Backend::set_weights

  // State of the last forward (pointers into the caller's arena).
  Arena* arena_ = nullptr;
  double recompute_ms_ = 0;
  int B_ = 0, T_ = 0;
  size_t forward_mark_ = 0;          // arena mark at forward() entry; backward() releases to it
  std::vector<size_t> layer_marks_;  // arena mark before each block's saved tensors
  size_t head_mark_ = 0;             // arena mark before the final LayerNorm's
  DBufs d_{};
  const int32_t* inputs_ = nullptr;   // the backend's copies (host memory on the CPU)
  const int32_t* targets_ = nullptr;
  // Where inputs and targets are staged for their upload (pinned on a device runtime), and
  // the upload last queued from it.
  struct TokenStage;
  std::unique_ptr<TokenStage> stage_;
  // Inputs then targets (N each) into DEV, the arena's copy, through stage_.
  void upload_tokens(int32_t* dev, const int32_t* inputs, const int32_t* targets, size_t N);
  void* encoded_ = nullptr;  // (B, T, C)  wte[inputs] + wpe
  std::vector<LayerActs> acts_;
  void* lnf_ = nullptr;        // (B, T, C)  final LayerNorm output
  float* lnf_mean_ = nullptr;  // (B, T)
  float* lnf_rstd_ = nullptr;  // (B, T)
  float* probs_ = nullptr;     // (B, T, V)  fp32 softmax of the logits
  float* losses_ = nullptr;    // (B, T)
};

}  // namespace ringstep
