// A device's runtime: everything outside the model's ops that depends on where memory lives
// (ggml's backend buffers). Memory and copies, the device's memory size, a clock on its
// compute stream, the peak that MFU divides by, the optimizer's passes over whole flat
// buffers, and the Backend of its ops. `FlatBuffer` and `Arena` hold one; no code outside
// core/cpu and core/cuda branches on the device.
//
// runtime(DEVICE) returns the process's one runtime of DEVICE, made on first use by
// make_runtime (core/runtime.cpp, the one place that knows which runtimes this build has).
// Runtimes live until the process exits. The optimizer passes are not thread-safe (one
// training thread per rank calls them); memory calls are.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/device_clock.h"
#include "core/dtype.h"
#include "core/optim_math.h"
#include "core/step_math.h"

namespace ringstep {

class Backend;
struct TensorInfo;

// Bytes of the device's memory: what is free for this process now, and the whole.
struct DeviceMemory {
  size_t free_bytes = 0, total_bytes = 0;
};

// MFU's denominator (docs/metrics.md) and where it comes from, for the log header.
struct Peak {
  double gflops = 0;   // 0 where the device is not known
  std::string source;  // "measured: 1-thread SGEMM ... x threads", "H200 SXM dense bf16, datasheet"
};

// A copy that Runtime::copy_to_host_async or copy_to_device_async queued; wait() blocks
// until it is done, on any thread (thread-safe).
class CopyInFlight {
 public:
  virtual ~CopyInFlight() = default;
  virtual void wait() = 0;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual Device device() const = 0;
  // "cpu", or the GPU's name as its driver reports it ("NVIDIA H200").
  virtual std::string device_name() const = 0;
  // True iff this runtime's memory is host memory: its pointers may be read by the CPU.
  virtual bool host_memory() const = 0;

  // BYTES of zeroes (at least 1 allocated), aligned to 64 bytes or more. Throws on failure.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;  // null is fine
  virtual void zero(void* p, size_t bytes) = 0;
  // BYTES from SRC to DST, each in this runtime's memory or in host memory; blocks until
  // done, ordered after all work queued before it.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual DeviceMemory memory() const = 0;

  // Copies that leave the compute stream running (a GPU's side streams), for gradients
  // staged through host memory bucket by bucket. HOST should be pinned (pin_host).
  // copy_to_host_async: BYTES from SRC (this runtime's memory) to HOST, behind all the work
  // queued on the compute stream so far by the calling thread (it copies what that work
  // writes). copy_to_device_async: BYTES from HOST to DST, not ordered after the compute
  // stream (its caller knows the compute stream does not touch DST meanwhile). Callable
  // from any thread. Without streams (the CPU), the copy is done before they return.
  virtual std::shared_ptr<CopyInFlight> copy_to_host_async(void* host, const void* src,
                                                           size_t bytes);
  virtual std::shared_ptr<CopyInFlight> copy_to_device_async(void* dst, const void* host,
                                                             size_t bytes);
  // BYTES from HOST to DST (this runtime's memory), queued on the compute stream: the work
  // the calling thread queues after it reads DST. HOST should be pinned (pin_host) and must
  // stay unchanged until the returned copy's wait() returns. Without streams (the CPU), the
  // copy is done before it returns.
  virtual std::shared_ptr<CopyInFlight> upload(void* dst, const void* host, size_t bytes);
  // Page-locks host memory [P, P + BYTES) for the copies above (cudaHostRegister); unpin_host
  // undoes it. No-ops where memory is the host's.
  virtual void pin_host(void* p, size_t bytes) {
    (void)p;
    (void)bytes;
  }
  virtual void unpin_host(void* p) noexcept { (void)p; }

  // The ops on activations of ACT_DTYPE (TF32 products for fp32 when TF32 is set).
  virtual std::unique_ptr<Backend> make_backend(DType act_dtype, bool tf32) = 0;
  // A clock on the compute stream with CAPACITY marks made ahead (core/device_clock.h); null
  // where the host clock times the device's work (the CPU).
  virtual std::unique_ptr<DeviceClock> make_clock(size_t capacity) = 0;
  // The peak of the products a model with ACT_DTYPE activations runs, over THREADS compute
  // threads of a rank. May take a second (the CPU measures it).
  virtual Peak peak(DType act_dtype, bool tf32, int threads) = 0;

  // The optimizer's passes over a flat buffer X[0, n) in this runtime's memory.
  // The sum of x^2, accumulated at least in float blocks folded into double.
  virtual double sum_squares(const float* x, size_t n) = 0;
  // X *= INV_SCALE (skipped when it is 1), then whether any element is inf or NaN.
  virtual bool unscale_and_check(float* x, size_t n, float inv_scale) = 0;
  // AdamW step S (core/optim_math.h) on each tensor of TENSORS, the ones marked decay with
  // DECAY (lr * weight_decay), the rest with 0. May return before the device is done.
  virtual void adamw_update(const std::vector<TensorInfo>& tensors, const AdamWStep& s, float decay,
                            float* params, const float* grads, float* m, float* v) = 0;

  // 1-bit Adam's passes (optim/onebit_adam.h), elementwise by core/optim_math.h's onebit_*
  // functions over elements [BEGIN, END) of flat buffers in this runtime's memory, queued
  // like the passes above (may return before the device is done).
  // M[i] = onebit_local_momentum(M[i], GRADS[i], BETA1, GRAD_SCALE): this rank's momentum.
  virtual void onebit_momentum(float* m, const float* grads, size_t begin, size_t end, float beta1,
                               float grad_scale) = 0;
  // The compression stage's update with the averaged momentum M: onebit_param_element on
  // each element of TENSORS in [BEGIN, END) (DECAY on tensors marked decay, 0 on the rest),
  // then M, WORKER_ERROR and SERVER_ERROR set to 0 wherever V is not onebit_live.
  virtual void onebit_update(const std::vector<TensorInfo>& tensors, size_t begin, size_t end,
                             const OneBitStep& s, float decay, float* params, float* m,
                             const float* v, float* worker_error, float* server_error) = 0;

  // The check, norm and AdamW passes above for a step the runtime decides itself
  // (core/step_math.h), queued without waiting: CARRY, STEP and OUT are in this runtime's
  // memory, and the host reads them later. The defaults reach them through host pointers
  // (runtimes whose memory the CPU reads) and run those passes; a device runtime overrides
  // all four.
  // X *= float(1 / carry->scaler.scale) (skipped when it is 1); STEP->bad = 1 where an
  // element is then inf or NaN.
  virtual void unscale_and_flag(float* x, size_t n, const StepCarry* carry, DeferredStep* step);
  virtual void sum_squares_into(const float* x, size_t n, double* out);  // *OUT = sum x^2
  virtual void decide(const StepRule& rule, StepCarry* carry, DeferredStep* step);
  // adamw_update with STEP's scalars where STEP->applied; nothing otherwise.
  virtual void adamw_update_if_applied(const std::vector<TensorInfo>& tensors,
                                       const DeferredStep* step, float* params, const float* grads,
                                       float* m, float* v);
};

// The process's runtime of DEVICE. Throws InputError "WHAT: device cuda is not available:
// <why>" where this build or machine cannot run it.
Runtime& runtime(Device device, const char* what = "run.device");

}  // namespace ringstep
