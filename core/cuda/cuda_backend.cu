#include "core/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/flash_tiling.h"
#include "core/cuda/gemm_plan.h"
#include "core/cuda/kernels.cuh"
#include "core/cuda/lt_gemm.h"
#include "core/cuda/ops_cuda.h"
#include "core/error.h"

namespace ringstep::cuda {
namespace {

namespace k = kernels;

constexpr int kBlock = 256;            // threads of elementwise and row kernels
constexpr int kRowsPerBlock = kBlock / 32;
constexpr int kXentThreads = 512;      // one block per row of the vocabulary
constexpr int kSumThreads = 256;

unsigned grid_for(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kBlock - 1) / kBlock, size_t(1) << 16));
}
unsigned grid_rows(int rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// Launches KERNEL over (GRID, BLOCK) on stream_ and checks the launch where it is written.
#define RS_LAUNCH(kernel, grid, block, ...)            \
  do {                                                 \
    kernel<<<(grid), (block), 0, stream_>>>(__VA_ARGS__); \
    CUDA_CHECK(cudaGetLastError());                    \
  } while (0)

template <typename S>
S* as(void* p) { return static_cast<S*>(p); }
template <typename S>
const S* as(const void* p) { return static_cast<const S*>(p); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(DType dt, bool tf32) : dt_(dt), tf32_(tf32) {}
  ~CudaBackend() override { device_free(weights16_); }

  Device device() const override { return Device::cuda; }
  size_t gemm_plans_built() const { return lt_.plans_built(); }
  size_t gemm_plans_without_algorithm() const { return lt_.plans_without_algorithm(); }
  DType act_dtype() const override { return dt_; }

  void set_weights(const float* params, size_t n) override {
    params_ = params;
    params_n_ = n;
    if (!half()) return;
    if (n != weights16_n_) {  // once per buffer size, outside any step
      device_free(weights16_);
      weights16_ = static_cast<uint16_t*>(device_alloc(n * sizeof(uint16_t)));
      weights16_n_ = n;
    }
    if (dt_ == DType::f16)
      fp32_to_fp16(params, weights16_, n, stream_);
    else
      fp32_to_bf16(params, weights16_, n, stream_);
  }

  size_t weight_copy_bytes(size_t n) const override { return half() ? n * sizeof(uint16_t) : 0; }

  void zero(float* x, size_t n, Arena& arena) override {
    if (!arena.counting() && n) CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), stream_));
  }

  void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, Arena& arena) override {
    if (arena.counting()) return;
    const size_t n = size_t(B) * T * C;
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::encoder_forward_kernel<S>, grid_for(n), kBlock, as<S>(out), tokens, wte, wpe, T, C, n);
    });
  }

  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, Arena& arena) override {
    if (arena.counting()) return;
    const size_t n = size_t(B) * T * C, tc = size_t(T) * C;
    RS_LAUNCH(k::encoder_backward_wte_kernel, grid_for(n), kBlock, dwte, dout, tokens, C, n);
    RS_LAUNCH(k::encoder_backward_wpe_kernel, grid_for(tc), kBlock, dwpe, dout, B, T, C, tc);
  }

  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                         const float* bias, int N, int C, Arena& arena) override {
    if (arena.counting()) return;
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::layernorm_forward_kernel<S>, grid_rows(N), kBlock, as<S>(out), mean, rstd,
                as<S>(inp), weight, bias, N, C);
    });
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const void* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C, Arena& arena) override {
    if (arena.counting()) return;
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::layernorm_backward_dinp_kernel<S>, grid_rows(N), kBlock, dinp, dout, as<S>(inp),
                weight, mean, rstd, N, C);
      column_sums(dweight, dbias, dout, as<S>(inp), mean, rstd, N, C);
    });
  }

  void linear_forward(void* out, const void* inp, const float* weight, const float* bias,
                      const void* residual, int N, int C, int OC, Arena& arena) override {
    ArenaScope scope(arena);
    const size_t n = size_t(N) * OC;
    // fp32: the product lands in OUT and the epilogue runs in place.
    float* y = half() ? arena.alloc_floats(n) : as<float>(out);
    if (arena.counting()) return;
    const GemmPlan plan = plan_linear_forward(N, C, OC);
    // Without a residual the bias rides on cuBLASLt's epilogue, straight into OUT (in the
    // storage type); the kernel below is the fallback where cuBLASLt has no such algorithm.
    if (residual == nullptr && bias != nullptr && aligned16(bias) &&
        lt_.run_bias(plan, {ab_type(), ab_type(), tf32_}, weight_operand(weight), inp, out, bias,
                     stream_))
      return;
    gemm(plan, weight_operand(weight), inp, y);
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::bias_residual_kernel<S>, grid_for(n), kBlock, as<S>(out), y, bias,
                as<S>(residual), OC, n);
    });
  }

  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const void* inp, const float* weight, int N, int C, int OC,
                       Arena& arena) override {
    ArenaScope scope(arena);
    const void* d = rounded(dout, size_t(N) * OC, arena);
    if (arena.counting()) return;
    if (dinp != nullptr) gemm(plan_linear_dinp(N, C, OC), weight_operand(weight), d, dinp);
    gemm(plan_linear_dweight(N, C, OC), inp, d, dweight);
    if (dbias != nullptr) column_sums<float>(nullptr, dbias, dout, nullptr, nullptr, nullptr, N, OC);
  }

  // The MLP's product and GELU in one cuBLASLt call (GELU_AUX_BIAS: PRE is the epilogue's
  // auxiliary output) where cuBLASLt has an algorithm for it and OC is a multiple of 8, else
  // the two ops. The fused call takes (and returns) the two ops' scratch too, so that the
  // counting pass, which cannot ask cuBLASLt, is exact whichever runs.
  bool fuses_gelu() const override { return true; }
  void linear_gelu_forward(void* out, void* pre, const void* inp, const float* weight,
                           const float* bias, int N, int C, int OC, Arena& arena) override {
    if (!arena.counting() && bias != nullptr && aligned16(bias) && OC % 8 == 0 &&
        lt_.run_gelu_aux_bias(plan_linear_forward(N, C, OC), {ab_type(), ab_type(), tf32_},
                              weight_operand(weight), inp, out, pre, bias, stream_)) {
      ArenaScope scope(arena);
      if (half()) arena.alloc_floats(size_t(N) * OC);  // linear_forward's fp32 result
      return;
    }
    Backend::linear_gelu_forward(out, pre, inp, weight, bias, N, C, OC, arena);
  }

  // fp32 storage: GELU' applied in the dinp product's epilogue (DGELU; its auxiliary input
  // has the output's type, fp32, so 16-bit storage runs the two ops).
  void linear_backward_gelu(float* dinp, float* dweight, float* dbias, const float* dout,
                            const void* inp, const float* weight, const void* gelu_inp, int N,
                            int C, int OC, Arena& arena) override {
    if (!half() && !arena.counting() && C % 8 == 0 &&
        lt_.run_dgelu(plan_linear_dinp(N, C, OC), {CUDA_R_32F, CUDA_R_32F, tf32_}, weight, dout,
                      dinp, gelu_inp, stream_)) {
      gemm(plan_linear_dweight(N, C, OC), inp, dout, dweight);
      if (dbias != nullptr)
        column_sums<float>(nullptr, dbias, dout, nullptr, nullptr, nullptr, N, OC);
      return;
    }
    Backend::linear_backward_gelu(dinp, dweight, dbias, dout, inp, weight, gelu_inp, N, C, OC,
                                  arena);
  }

  void logits_forward(float* logits, const void* inp, const float* wte, int N, int C, int V,
                      int vocab, Arena& arena) override {
    if (arena.counting()) return;
    gemm(plan_linear_forward(N, C, V), weight_operand(wte), inp, logits);
    mask_columns(logits, N, V, vocab);
  }

  // The state is one fp32 log-sum-exp per query row (core/cuda/flash_attention.h).
  size_t attention_state_bytes(int B, int T, int NH) const override {
    return size_t(ringstep::attention_state_bytes(Device::cuda, act_dtype(), B, T, NH));
  }

  void attention_forward(void* out, void* state, const void* qkv, int B, int T, int C, int NH,
                         Arena& arena) override {
    check_head_size(C, NH);
    if (arena.counting()) return;
    flash_attention_forward(flash_kernel_for(dt_), dt_, out, static_cast<float*>(state), qkv, B, T,
                            C, NH, stream_);
  }

  void attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out,
                          const void* state, int B, int T, int C, int NH, Arena& arena) override {
    check_head_size(C, NH);
    ArenaScope scope(arena);
    float* dsum = arena.alloc_floats(size_t(B) * NH * T);
    if (arena.counting()) return;
    flash_attention_backward(flash_kernel_for(dt_), dt_, dqkv, dout, qkv, out,
                             static_cast<const float*>(state), dsum, B, T, C, NH, stream_);
  }

  void gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) override {
    if (arena.counting()) return;
    const size_t n = size_t(N) * C;
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::gelu_forward_kernel<S>, grid_for(n), kBlock, as<S>(out), as<S>(inp), n);
    });
  }

  void gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) override {
    if (arena.counting()) return;
    const size_t n = size_t(N) * C;
    dispatch([&]<typename S>() {
      RS_LAUNCH(k::gelu_backward_kernel<S>, grid_for(n), kBlock, d, as<S>(inp), n);
    });
  }

  void crossentropy_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V, double* loss_sum,
                            Arena& arena) override {
    if (arena.counting()) return;
    RS_LAUNCH(k::softmax_xent_kernel, unsigned(N), kXentThreads, losses, probs, logits, targets, V);
    RS_LAUNCH(k::add_mean_loss_kernel<kSumThreads>, 1u, kSumThreads, loss_sum, losses, N);
  }

  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                             const float* dloss, int N, int V, Arena& arena) override {
    if (arena.counting()) return;
    const size_t n = size_t(N) * V;
    RS_LAUNCH(k::xent_backward_kernel, grid_for(n), kBlock, dlogits, probs, targets, dloss, N, V,
              n);
  }

 private:
  bool half() const { return dt_ != DType::f32; }
  cudaDataType_t ab_type() const {
    return dt_ == DType::bf16 ? CUDA_R_16BF : dt_ == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
  }

  // The fused attention's head sizes, refused where a model is first sized (the counting
  // pass) rather than inside a step.
  static void check_head_size(int C, int NH) {
    if (NH > 0 && C % NH == 0 && flash::padded_head_size(C / NH) != 0) return;
    throw InputError("backend: device cuda runs attention with head sizes (d_model / n_heads) " +
                     std::string("1 to ") + std::to_string(flash::kMaxHeadSize) + "; got d_model " +
                     std::to_string(C) + ", n_heads " + std::to_string(NH));
  }

  // Calls FN.template operator()<S>() with S the storage type (kernel_common.cuh).
  template <typename Fn>
  void dispatch(Fn&& fn) {
    k::with_storage(dt_, fn);
  }

  // A product with fp32 output.
  void gemm(const GemmPlan& p, const void* A, const void* B, float* C) {
    lt_.run(p, {ab_type(), CUDA_R_32F, tf32_}, A, B, C, stream_);
  }

  static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

  // The operand a product reads for weight W: W itself (fp32) or its bf16 copy.
  const void* weight_operand(const float* w) const {
    if (!half()) return w;
    const std::less<const float*> before;
    if (params_ == nullptr || before(w, params_) || !before(w, params_ + params_n_))
      throw std::logic_error("CudaBackend: a weight outside the buffer given to set_weights");
    return weights16_ + (w - params_);
  }

  // X (fp32, N values) as a product operand: X itself, or a 16-bit copy in arena scratch.
  const void* rounded(const float* x, size_t n, Arena& arena) {
    if (!half()) return x;
    void* r = arena.alloc_bytes(n * sizeof(uint16_t));
    if (!arena.counting())
      dispatch([&]<typename S>() {
        RS_LAUNCH(k::narrow_kernel<S>, grid_for(n), kBlock, as<S>(r), x, n);
      });
    return r;
  }

  // dw[c] += sum_r dout[r, c] xhat[r, c] (when INP is given), db[c] += sum_r dout[r, c].
  template <typename S>
  void column_sums(float* dw, float* db, const float* dout, const S* inp, const float* mean,
                   const float* rstd, int N, int C) {
    const int rows = std::max(64, (N + 65534) / 65535);  // grid.y stays within its limit
    const dim3 grid(unsigned((C + 31) / 32), unsigned((N + rows - 1) / rows)), block(32, 8);
    RS_LAUNCH(k::column_sums_kernel<S>, grid, block, dw, db, dout, inp, mean, rstd, N, C, rows);
  }

  DType dt_;
  bool tf32_;
  cudaStream_t stream_ = nullptr;  // the legacy default stream: ordered with plain cudaMemcpy
  LtGemm lt_;
  const float* params_ = nullptr;
  size_t params_n_ = 0;
  uint16_t* weights16_ = nullptr;
  size_t weights16_n_ = 0;
};

#undef RS_LAUNCH

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(DType act_dtype, bool tf32) {
  use_local_device();
  return std::make_unique<CudaBackend>(act_dtype, tf32);
}

size_t gemm_plans_without_algorithm(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr) throw std::logic_error("gemm_plans_without_algorithm: not a CUDA backend");
  return cuda->gemm_plans_without_algorithm();
}

size_t gemm_plans_built(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr) throw std::logic_error("gemm_plans_built: not a CUDA backend");
  return cuda->gemm_plans_built();
}

}  // namespace ringstep::cuda
