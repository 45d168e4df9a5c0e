// The CPU backend's contracts (core/backend.h, core/cpu/cpu_backend.h):
// - on a counting arena every op makes exactly the allocations of a real call and writes
//   nothing, for every storage dtype (this is what makes Gpt::count_arena_bytes exact);
// - the 16-bit path's row blocks give the same bits as one whole-tensor call of the fp32
//   op on the widened values, rounded once (row blocking only bounds the scratch);
// - 16-bit matrix products read the weight copy made by set_weights.
// N = 600 rows: more than one row block (256) and one product block (512).
#include "core/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"
#include "core/dtype.h"

namespace ringstep::cpu {
namespace {

constexpr int B = 2, T = 300, N = B * T, C = 32, NH = 2, V = 48;
// Parameter layout: wte (V, C) | wpe (T, C) | w (4C, C) | bias (4C) | ln_w (C) | ln_b (C).
constexpr size_t kWte = 0, kWpe = kWte + V * C, kW = kWpe + T * C, kBias = kW + 4 * C * C,
                 kLnW = kBias + 4 * C, kLnB = kLnW + C, kParams = kLnB + C;
constexpr size_t kArenaBytes = size_t{1} << 22;

// 64-byte aligned storage, as the arena and the flat buffers give the model: Eigen's row
// reductions (the LayerNorm mean) start their vector loop at the first aligned element, so
// their rounding depends on a row's alignment, and the references below must match it.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  bool operator==(const Aligned64&) const { return true; }
  static constexpr std::align_val_t kAlign{64};
};
using Vec = std::vector<float, Aligned64<float>>;

// Every buffer the ops read or write. Stored tensors are sized in floats so that they fit
// any dtype; in 16 bits only the first half of their bytes is used.
struct Buffers {
  Vec params, grads;
  Vec x, res, out, qkv, att;                          // stored
  Vec dout, dinp, mean, rstd, logits, probs, losses;  // fp32
  std::vector<int32_t> tokens;
  double loss_sum = 0;     // crossentropy_forward's
  float dloss_seed = 0.5f;  // crossentropy_backward's

  const float* p(size_t at) const { return params.data() + at; }
  float* g(size_t at) { return grads.data() + at; }
  std::vector<Vec*> all() {
    return {&params, &grads, &x,    &res,  &out,    &qkv,   &att,
            &dout,   &dinp,  &mean, &rstd, &logits, &probs, &losses};
  }
};

Vec Random(size_t n, std::mt19937& gen) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = nd(gen);
  return v;
}

// N random values stored as DT in a buffer of N floats.
Vec RandomStored(DType dt, size_t n, std::mt19937& gen) {
  Vec v = Random(n, gen);
  if (dt != DType::f32) narrow_from_fp32(dt, v.data(), reinterpret_cast<uint16_t*>(v.data()), n);
  return v;
}

Buffers MakeBuffers(DType dt) {
  std::mt19937 gen(7);
  const size_t NC = size_t(N) * C;
  Buffers b;
  b.params = Random(kParams, gen);
  b.grads = Random(kParams, gen);
  b.x = RandomStored(dt, 4 * NC, gen);
  b.res = RandomStored(dt, 4 * NC, gen);
  b.out = RandomStored(dt, 4 * NC, gen);
  b.qkv = RandomStored(dt, 3 * NC, gen);
  b.att = RandomStored(dt, size_t(B) * NH * T * T, gen);
  for (auto* v : {&b.dout, &b.dinp}) *v = Random(4 * NC, gen);
  for (auto* v : {&b.mean, &b.rstd, &b.losses}) *v = Random(N, gen);
  for (auto* v : {&b.logits, &b.probs}) *v = Random(size_t(N) * V, gen);
  for (float& r : b.rstd) r = 1.0f + r * r;
  b.tokens.resize(N);
  for (int32_t& t : b.tokens) t = int32_t(gen() % V);
  return b;
}

bool SameBits(Buffers& a, Buffers& b) {
  const auto va = a.all(), vb = b.all();
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i]->size() != vb[i]->size() ||
        std::memcmp(va[i]->data(), vb[i]->data(), va[i]->size() * sizeof(float)) != 0)
      return false;
  return true;
}

using Op = void (*)(Backend&, Buffers&, Arena&);
const std::vector<std::pair<std::string, Op>>& Ops() {
  static const std::vector<std::pair<std::string, Op>> kOps = {
      {"zero", [](Backend& be, Buffers& b, Arena& a) { be.zero(b.dinp.data(), N * C, a); }},
      {"encoder_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.encoder_forward(b.out.data(), b.tokens.data(), b.p(kWte), b.p(kWpe), B, T, C, a);
       }},
      {"encoder_backward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.encoder_backward(b.g(kWte), b.g(kWpe), b.dout.data(), b.tokens.data(), B, T, C, a);
       }},
      {"layernorm_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.layernorm_forward(b.out.data(), b.mean.data(), b.rstd.data(), b.x.data(), b.p(kLnW),
                              b.p(kLnB), N, C, a);
       }},
      {"layernorm_backward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.layernorm_backward(b.dinp.data(), b.g(kLnW), b.g(kLnB), b.dout.data(), b.x.data(),
                               b.p(kLnW), b.mean.data(), b.rstd.data(), N, C, a);
       }},
      {"linear_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.linear_forward(b.out.data(), b.x.data(), b.p(kW), b.p(kBias), b.res.data(), N, C, 4 * C,
                           a);
       }},
      {"linear_backward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.linear_backward(b.dinp.data(), b.g(kW), b.g(kBias), b.dout.data(), b.x.data(), b.p(kW),
                            N, C, 4 * C, a);
       }},
      {"logits_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.logits_forward(b.logits.data(), b.x.data(), b.p(kWte), N, C, V, V, a);
       }},
      {"attention_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.attention_forward(b.out.data(), b.att.data(), b.qkv.data(), B, T, C, NH, a);
       }},
      {"attention_backward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.attention_backward(b.dinp.data(), b.dout.data(), b.qkv.data(), b.out.data(),
                               b.att.data(), B, T, C, NH, a);
       }},
      {"gelu_forward", [](Backend& be, Buffers& b,
                          Arena& a) { be.gelu_forward(b.out.data(), b.x.data(), 4 * N, C, a); }},
      {"gelu_backward", [](Backend& be, Buffers& b,
                           Arena& a) { be.gelu_backward(b.dinp.data(), b.x.data(), 4 * N, C, a); }},
      {"crossentropy_forward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.crossentropy_forward(b.losses.data(), b.probs.data(), b.logits.data(), b.tokens.data(),
                                 N, V, &b.loss_sum, a);
       }},
      {"crossentropy_backward",
       [](Backend& be, Buffers& b, Arena& a) {
         be.crossentropy_backward(b.logits.data(), b.probs.data(), b.tokens.data(), &b.dloss_seed, N,
                                  V, a);
       }},
  };
  return kOps;
}

class CpuBackendDtype : public ::testing::TestWithParam<DType> {};

TEST_P(CpuBackendDtype, CountingMakesTheRealAllocationsAndWritesNothing) {
  const DType dt = GetParam();
  for (const auto& [name, op] : Ops()) {
    SCOPED_TRACE(name);
    Buffers b = MakeBuffers(dt), before = MakeBuffers(dt);
    CpuBackend be(dt);
    be.set_weights(b.params.data(), b.params.size());
    Arena counter = Arena::make_counting();
    op(be, b, counter);
    EXPECT_TRUE(SameBits(b, before)) << "a counting call wrote a buffer";
    Arena real(kArenaBytes);
    op(be, b, real);
    EXPECT_FALSE(SameBits(b, before)) << "the real call must write something";
    EXPECT_EQ(counter.peak_bytes(), real.peak_bytes());
    EXPECT_EQ(real.used_bytes(), 0u) << "scratch is released before the op returns";
    EXPECT_EQ(counter.used_bytes(), 0u);
    if (dt == DType::f32) EXPECT_EQ(real.peak_bytes(), 0u) << "fp32 needs no scratch";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuBackendDtype,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Runs OP once on the fresh buffers of DT and returns them with the arena's peak.
std::pair<Buffers, size_t> RunOp(DType dt, const std::string& name) {
  Buffers b = MakeBuffers(dt);
  CpuBackend be(dt);
  be.set_weights(b.params.data(), b.params.size());
  Arena arena(kArenaBytes);
  for (const auto& [n, op] : Ops())
    if (n == name) op(be, b, arena);
  return {std::move(b), arena.peak_bytes()};
}

TEST(CpuBackend, SixteenBitScratchIsOneRowBlock) {
  const size_t row_block = size_t(CpuBackend::kRowBlock) * C * sizeof(float);
  const size_t gemm_block = size_t(CpuBackend::kGemmRowBlock) * 4 * C * sizeof(float);
  EXPECT_EQ(RunOp(DType::bf16, "layernorm_forward").second, 2 * row_block);  // in, out
  EXPECT_EQ(RunOp(DType::bf16, "layernorm_backward").second, row_block);     // in
  EXPECT_EQ(RunOp(DType::bf16, "gelu_forward").second, 2 * row_block);       // in, out
  EXPECT_EQ(RunOp(DType::bf16, "linear_forward").second, 2 * gemm_block);    // out, residual
  // dout rounded: kept in fp32 where gemm16 widens, else as 16-bit bits
  EXPECT_EQ(RunOp(DType::bf16, "linear_backward").second,
            cpu::gemm16_widens(DType::bf16) ? gemm_block : gemm_block / 2);
  EXPECT_EQ(RunOp(DType::bf16, "encoder_forward").second, size_t(N) * C * 4);  // whole tensor
}

bool BitEqual(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What the header reports as the weight copies: none in fp32, the 16-bit copy in bf16 and
// fp16, and its fp32 widening where gemm16 widens (no AMX); forcing the fallback shows both.
TEST(CpuBackend, WeightCopyBytesCountTheCopiesSetWeightsMakes) {
  const size_t n = 1000;
  EXPECT_EQ(CpuBackend(DType::f32).weight_copy_bytes(n), 0u);
  EXPECT_EQ(CpuBackend(DType::f16).weight_copy_bytes(n), 6 * n) << "fp16 always widens";
  cpu::gemm16_force_fallback(true);
  EXPECT_EQ(CpuBackend(DType::bf16).weight_copy_bytes(n), 6 * n);
  cpu::gemm16_force_fallback(false);
  EXPECT_EQ(CpuBackend(DType::bf16).weight_copy_bytes(n),
            (cpu::gemm16_widens(DType::bf16) ? 6 : 2) * n);
  const char* env = std::getenv("RINGSTEP_GEMM16");
  cpu::gemm16_force_fallback(env != nullptr && std::string(env) == "sgemm");
}

// The attention state the CPU saves is the probabilities, (B, NH, T, T) in the storage dtype.
TEST(CpuBackend, AttentionStateIsTheProbabilities) {
  EXPECT_EQ(CpuBackend(DType::f32).attention_state_bytes(3, 17, 5), size_t(3) * 5 * 17 * 17 * 4);
  EXPECT_EQ(CpuBackend(DType::bf16).attention_state_bytes(3, 17, 5), size_t(3) * 5 * 17 * 17 * 2);
}

// The input gradients a backward op writes (linear's dinp, the logits') come out the same
// whatever the buffer held, NaN included, and the parameter gradients still add up.
TEST_P(CpuBackendDtype, InputGradientsAreWrittenNotAdded) {
  const DType dt = GetParam();
  for (const char* name : {"linear_backward", "crossentropy_backward"}) {
    SCOPED_TRACE(name);
    const bool linear = std::string(name) == "linear_backward";
    const Buffers once = RunOp(dt, name).first;
    Buffers b = MakeBuffers(dt);
    Vec& written = linear ? b.dinp : b.logits;
    std::fill(written.begin(), written.end(), std::numeric_limits<float>::quiet_NaN());
    CpuBackend be(dt);
    be.set_weights(b.params.data(), b.params.size());
    Arena arena(kArenaBytes);
    for (const auto& [n, op] : Ops())
      if (n == name) op(be, b, arena);
    const Vec& want = linear ? once.dinp : once.logits;
    const size_t n = linear ? size_t(N) * C : size_t(N) * V;  // the op's extent
    EXPECT_EQ(std::memcmp(written.data(), want.data(), n * sizeof(float)), 0);
    EXPECT_TRUE(BitEqual(b.grads, once.grads));
    if (linear) EXPECT_FALSE(BitEqual(b.grads, MakeBuffers(dt).grads)) << "dweight added";
  }
}

// Whether stored tensor S begins with the N values of Y rounded to DT.
bool StoresRounded(DType dt, const Vec& s, const float* y, size_t n) {
  std::vector<uint16_t> want(n);
  narrow_from_fp32(dt, y, want.data(), n);
  return std::memcmp(s.data(), want.data(), n * sizeof(uint16_t)) == 0;
}

// The reference is the fp32 op on the whole widened tensor, rounded once.
TEST(CpuBackend, SixteenBitRowBlocksMatchOneWholeTensorCall) {
  const size_t NC = size_t(N) * C;
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffers r = MakeBuffers(dt);
    Vec x_vec(4 * NC), y_vec(NC), y4_vec(4 * NC);
    float *x = x_vec.data(), *y = y_vec.data(), *y4 = y4_vec.data();
    widen_to_fp32(dt, reinterpret_cast<const uint16_t*>(r.x.data()), x, 4 * NC);

    const Buffers ln = RunOp(dt, "layernorm_forward").first;
    cpu::layernorm_forward(y, r.mean.data(), r.rstd.data(), x, r.p(kLnW), r.p(kLnB), N, C);
    EXPECT_TRUE(StoresRounded(dt, ln.out, y, NC));
    EXPECT_TRUE(BitEqual(ln.mean, r.mean));
    EXPECT_TRUE(BitEqual(ln.rstd, r.rstd));

    r = MakeBuffers(dt);
    const Buffers lnb = RunOp(dt, "layernorm_backward").first;
    cpu::layernorm_backward(r.dinp.data(), r.g(kLnW), r.g(kLnB), r.dout.data(), x, r.p(kLnW),
                            r.mean.data(), r.rstd.data(), N, C);
    EXPECT_TRUE(BitEqual(lnb.dinp, r.dinp));
    EXPECT_TRUE(BitEqual(lnb.grads, r.grads)) << "dweight, dbias: the rows in the same order";

    const Buffers gelu = RunOp(dt, "gelu_forward").first;
    cpu::gelu_forward(y4, x, 4 * NC);
    EXPECT_TRUE(StoresRounded(dt, gelu.out, y4, 4 * NC));

    const Buffers gelub = RunOp(dt, "gelu_backward").first;
    r = MakeBuffers(dt);
    cpu::gelu_backward_inplace(r.dinp.data(), x, 4 * NC);
    EXPECT_TRUE(BitEqual(gelub.dinp, r.dinp));
  }
}

TEST(CpuBackend, SixteenBitProductsReadTheCopyMadeBySetWeights) {
  Buffers b = MakeBuffers(DType::bf16);
  CpuBackend be(DType::bf16);
  be.set_weights(b.params.data(), b.params.size());
  Arena arena(kArenaBytes);
  const Vec out0 = b.out;
  auto run = [&] {
    b.out = out0;
    be.linear_forward(b.out.data(), b.x.data(), b.p(kW), b.p(kBias), nullptr, N, C, 4 * C, arena);
    return b.out;
  };
  const Vec first = run();
  b.params[kW] += 1.0f;  // row 0 of the weight: output column 0 of every row
  EXPECT_EQ(run(), first) << "the weights changed but set_weights was not called";
  be.set_weights(b.params.data(), b.params.size());
  EXPECT_NE(run(), first);
  Vec elsewhere(4 * C * C);
  EXPECT_THROW(be.linear_forward(b.out.data(), b.x.data(), elsewhere.data(), b.p(kBias), nullptr, N,
                                 C, 4 * C, arena),
               std::logic_error);
}

}  // namespace
}  // namespace ringstep::cpu
