// gemm16: argument checks, kernel choice and the fp32-sgemm kernel. The bf16 kernels live in
// gemm16_amx.cpp and gemm16_avx512.cpp, the only files compiled with AMX or AVX512-BF16
// flags: none of their instructions runs before the CPUID (and, for AMX, permission) check
// below.
//
// fp32-sgemm kernel: both 16-bit operands go to sgemm (sgemm.h) with the same transposes,
// which widens them to fp32 (exact for bf16 and fp16) as it packs them. Its bits
// do not depend on the thread count on our kernel; on OpenBLAS's (AVX-512 hosts) the
// SkylakeX kernels split M and N only, which keeps that too (docs/perf-log.md section 14).
#include "core/cpu/gemm16.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu/sgemm.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ringstep::cpu {

// Defined in gemm16_amx.cpp. amx_kernel_compiled() is false when the compiler could not
// build the AMX code; gemm16_amx_bf16 must only be called once amx_usable() holds.
namespace detail {
bool amx_kernel_compiled();
// B_PACKED: op(B) as pack_b_amx packed it (then B is not read), or null.
void gemm16_amx_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                     const uint16_t* A, int lda, const uint16_t* B, int ldb, const char* b_packed,
                     float beta, float* C, int ldc, const float* bias);
size_t packed_b_bytes_amx(int K, int N);
void pack_b_amx(bool trans_b, int K, int N, const uint16_t* B, int ldb, char* dst);
// Defined in gemm16_avx512.cpp, likewise.
bool avx512_bf16_kernel_compiled();
void gemm16_avx512_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        const char* b_packed, float beta, float* C, int ldc, const float* bias);
size_t packed_b_bytes_avx512(int K, int N);
void pack_b_avx512(bool trans_b, int K, int N, const uint16_t* B, int ldb, char* dst);
}  // namespace detail

namespace {

// CPUID leaf 7, sub-leaf 0 (Intel SDM vol. 2A, table 3-8): EBX bits 16/30/31 = AVX-512
// F/BW/VL (the packing code), EDX bits 22/24 = AMX-BF16/AMX-TILE. Then Linux only lets a
// process touch tile data after it asked for it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, Documentation/arch/x86/xstate.rst); the grant is process-wide.
bool detect_amx() {
#if defined(__x86_64__) && defined(__linux__)
  if (!detail::amx_kernel_compiled()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned avx512_f_bw_vl = (1u << 16) | (1u << 30) | (1u << 31);
  const unsigned amx_bf16_tile = (1u << 22) | (1u << 24);
  if ((ebx & avx512_f_bw_vl) != avx512_f_bw_vl || (edx & amx_bf16_tile) != amx_bf16_tile) {
    return false;
  }
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool amx_usable() {
  static const bool usable = detect_amx();  // thread-safe initialisation (C++11)
  return usable;
}

// VDPBF16PS with the AVX-512 F/BW/VL the packing uses; GCC's check includes the OS's
// support for the zmm state (XCR0).
bool avx512_bf16_usable() {
#if defined(__x86_64__)
  static const bool usable =
      detail::avx512_bf16_kernel_compiled() && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bf16");
  return usable;
#else
  return false;
#endif
}

bool env_forces_fallback() {
  const char* v = std::getenv("RINGSTEP_GEMM16");
  return v != nullptr && std::string(v) == "sgemm";
}

std::atomic<bool>& forced_fallback() {
  static std::atomic<bool> forced{env_forces_fallback()};
  return forced;
}

// gemm16's kernels, best first: bf16 on AMX tiles, bf16 on AVX512-BF16 dot products, and
// everything (fp16 always) widened to fp32 for sgemm.
enum class Kernel16 { amx_bf16, avx512_bf16, fp32_sgemm };

Kernel16 kernel_for(DType dt) {
  if (dt != DType::bf16 || forced_fallback().load(std::memory_order_relaxed))
    return Kernel16::fp32_sgemm;
  if (amx_usable()) return Kernel16::amx_bf16;
  if (avx512_bf16_usable()) return Kernel16::avx512_bf16;
  return Kernel16::fp32_sgemm;
}

// C = beta * C + bias over M x N, with beta == 0 writing zeros (plus the bias) whatever C
// held.
void scale_c(int M, int N, float beta, const float* bias, float* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    float* row = C + size_t(i) * ldc;
    for (int j = 0; j < N; ++j) {
      const float t = beta == 0.0f ? 0.0f : beta == 1.0f ? row[j] : beta * row[j];
      row[j] = bias != nullptr ? t + bias[j] : t;
    }
  }
}

// An operand as sgemm reads it: OP's widening when the caller holds one, else its bits.
SgemmOperand sgemm_operand(DType dt, const Operand16& op) {
  if (op.wide != nullptr) return {op.wide, nullptr, DType::f32, op.ld_wide};
  return {nullptr, op.bits, dt, op.ld};
}

void gemm16_sgemm(DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  const Operand16& A, const Operand16& B, float beta, float* C, int ldc,
                  const float* bias) {
  sgemm(trans_a, trans_b, M, N, K, alpha, sgemm_operand(dt, A), sgemm_operand(dt, B), beta, C, ldc,
        bias);
}

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("gemm16: " + what); }

void check_ld(const std::string& name, int ld, int row) {
  if (ld < std::max(1, row))
    fail(name + "=" + std::to_string(ld) + " is shorter than a row of " + std::to_string(row));
}

// An operand read as NAME with rows of ROW values (READ: the product reads it at all).
void check_operand(DType dt, const char* name, const Operand16& op, int row, bool read) {
  if (read && op.bits == nullptr && (op.wide == nullptr || !gemm16_widens(dt)))
    fail(std::string(name) + " has no 16-bit values and the kernel reads them");
  if (op.bits != nullptr) check_ld(std::string("ld") + name, op.ld, row);
  if (op.wide != nullptr) check_ld(std::string("ld") + name + " (widened)", op.ld_wide, row);
}

void check_sizes(DType dt, int M, int N, int K) {
  if (dt != DType::bf16 && dt != DType::f16) fail("dtype must be bf16 or fp16");
  if (M < 0 || N < 0 || K < 0) {
    fail("negative size M=" + std::to_string(M) + " N=" + std::to_string(N) +
         " K=" + std::to_string(K));
  }
}

void check_args(DType dt, bool trans_a, bool trans_b, int M, int N, int K, const Operand16& A,
                const Operand16& B, int ldc) {
  check_sizes(dt, M, N, K);
  const bool read = M > 0 && N > 0 && K > 0;
  check_operand(dt, "a", A, trans_a ? M : K, read);
  check_operand(dt, "b", B, trans_b ? K : N, read);
  check_ld("ldc", ldc, N);
}

// One of the bf16 tile kernels (amx_bf16 or avx512_bf16) on A and op(B), read from B or,
// when B_PACKED is set, from that packing (pack_b_amx / pack_b_avx512).
void gemm16_tiles(Kernel16 kernel, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  const Operand16& A, const uint16_t* B, int ldb, const char* b_packed, float beta,
                  float* C, int ldc, const float* bias) {
  if (kernel == Kernel16::amx_bf16)
    return detail::gemm16_amx_bf16(trans_a, trans_b, M, N, K, alpha, A.bits, A.ld, B, ldb, b_packed,
                                   beta, C, ldc, bias);
  detail::gemm16_avx512_bf16(trans_a, trans_b, M, N, K, alpha, A.bits, A.ld, B, ldb, b_packed, beta,
                             C, ldc, bias);
}

}  // namespace

void gemm16(DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm16(dt, trans_a, trans_b, M, N, K, alpha, Operand16{A, lda}, Operand16{B, ldb}, beta, C, ldc);
}

void gemm16(DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const Operand16& A, const Operand16& B, float beta, float* C, int ldc,
            const float* bias) {
  check_args(dt, trans_a, trans_b, M, N, K, A, B, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, bias, C, ldc);
  const Kernel16 kernel = kernel_for(dt);
  if (kernel == Kernel16::fp32_sgemm)
    return gemm16_sgemm(dt, trans_a, trans_b, M, N, K, alpha, A, B, beta, C, ldc, bias);
  gemm16_tiles(kernel, trans_a, trans_b, M, N, K, alpha, A, B.bits, B.ld, nullptr, beta, C, ldc,
               bias);
}

void PackedB16::pack(DType dt, bool trans_b, int K, int N, const Operand16& B) {
  check_sizes(dt, 0, N, K);
  check_operand(dt, "b", B, trans_b ? K : N, N > 0 && K > 0);
  dt_ = dt;
  trans_b_ = trans_b;
  K_ = K;
  N_ = N;
  view_ = B;
  const Kernel16 kernel = kernel_for(dt);
  tiles_ = kernel != Kernel16::fp32_sgemm && K > 0 && N > 0;
  if (!tiles_) return;
  const bool amx = kernel == Kernel16::amx_bf16;
  // Only grows: resizing down and up again would zero the difference on every pack.
  const size_t bytes = amx ? detail::packed_b_bytes_amx(K, N) : detail::packed_b_bytes_avx512(K, N);
  if (packed_.size() < bytes) packed_.resize(bytes);
  (amx ? detail::pack_b_amx : detail::pack_b_avx512)(trans_b, K, N, B.bits, B.ld, packed_.data());
}

void gemm16(DType dt, bool trans_a, int M, int N, int K, float alpha, const Operand16& A,
            const PackedB16& B, float beta, float* C, int ldc, const float* bias) {
  if (dt != B.dt_ || K != B.K_ || N != B.N_) {
    throw std::invalid_argument("gemm16: a PackedB16 of " + std::to_string(B.K_) + " x " +
                                std::to_string(B.N_) + " used as " + std::to_string(K) + " x " +
                                std::to_string(N));
  }
  const Kernel16 kernel = kernel_for(dt);
  if (!B.tiles_ || kernel == Kernel16::fp32_sgemm)
    return gemm16(dt, trans_a, B.trans_b_, M, N, K, alpha, A, B.view_, beta, C, ldc, bias);
  check_args(dt, trans_a, B.trans_b_, M, N, K, A, B.view_, ldc);
  if (M == 0) return;
  gemm16_tiles(kernel, trans_a, B.trans_b_, M, N, K, alpha, A, nullptr, 0, B.packed_.data(), beta,
               C, ldc, bias);
}

bool gemm16_widens(DType dt) { return kernel_for(dt) == Kernel16::fp32_sgemm; }

const char* gemm16_kernel(DType dt) {
  switch (kernel_for(dt)) {
    case Kernel16::amx_bf16:
      return "amx-bf16";
    case Kernel16::avx512_bf16:
      return "avx512-bf16";
    case Kernel16::fp32_sgemm:
      break;
  }
  return "fp32-sgemm";
}

void gemm16_force_fallback(bool force) {
  forced_fallback().store(force, std::memory_order_relaxed);
}

}  // namespace ringstep::cpu
