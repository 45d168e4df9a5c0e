// attention_forward16 / attention_backward16 against references, for bf16 and fp16 and for
// both gemm16 kernels (the machine's default, AMX for bf16 where the CPU has it, and the
// forced fp32-sgemm fallback).
//
// Forward: an fp64 reference from the same 16-bit q, k, v. Each stored probability is the
// exact one rounded to DT, so |p16 - p64| <= u p64 (u = 2^-9 bf16, 2^-12 fp16) plus the
// fp32 error of S and the softmax (~1e-6 relative); 2u is the bound. out is checked against
// fp64 P16 v, the product of the rounded P actually stored, so only the fp32 accumulation
// (1e-5 sum|p v|, see gemm16_test.cpp) and out's own rounding (2u |o|) remain.
// Backward: the fp32 attention_backward run on the widened inputs and the widened stored
// P. The 16-bit version differs by rounding dO and dS to DT, a relative error of at most u
// per entry: relative L2 ~ u (measured 0.9-1.3u), so 4u (7.8e-3 bf16, 9.8e-4 fp16) catches
// a wrong index or scale (O(1)) without flaking.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/attention16.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"
#include "core/dtype.h"
#include "core/threads.h"

namespace ringstep::cpu {
namespace {

struct Shape {
  int B, T, C, NH;
};
// T = 1 (a single live entry), T < 64 and not a multiple of 16, a last query block of 6
// rows, exact multiples of the block; hs = 16, 32, 64.
const Shape kShapes[] = {
    {1, 1, 64, 1}, {3, 17, 64, 4}, {1, 70, 256, 4}, {3, 128, 64, 1}, {1, 200, 128, 4}};
const DType kDtypes[] = {DType::bf16, DType::f16};

double unit_roundoff(DType dt) { return dt == DType::bf16 ? 0x1p-9 : 0x1p-12; }
float widen1(DType dt, uint16_t h) { return dt == DType::bf16 ? bf16_to_fp32(h) : fp16_to_fp32(h); }
uint16_t narrow1(DType dt, float x) {
  return dt == DType::bf16 ? fp32_to_bf16(x) : fp32_to_fp16(x);
}
std::vector<float> widen(DType dt, const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = widen1(dt, h[i]);
  return f;
}

// Runs the body on the default gemm16 kernel and on the forced fp32-sgemm one, then
// restores what the environment asked for (as gemm16_test.cpp does).
template <typename F>
void for_each_kernel(F body) {
  for (const bool fallback : {false, true}) {
    gemm16_force_fallback(fallback);
    SCOPED_TRACE(fallback ? "kernel fp32-sgemm (forced)" : "kernel default");
    body();
  }
  const char* env = std::getenv("RINGSTEP_GEMM16");
  gemm16_force_fallback(env != nullptr && std::string(env) == "sgemm");
}

// One problem: q, k, v ~ N(0, 1.5^2) so that the softmax rows range from flat to peaked,
// and dout ~ N(0, 1), all stored rounded to DT.
struct Problem {
  DType dt;
  Shape s;
  std::vector<uint16_t> qkv;
  std::vector<float> dout;

  Problem(DType dt_, Shape s_, unsigned seed) : dt(dt_), s(s_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    qkv.resize(size_t(s.B) * s.T * 3 * s.C);
    for (uint16_t& x : qkv) x = narrow1(dt, 1.5f * dist(rng));
    dout.resize(size_t(s.B) * s.T * s.C);
    for (float& x : dout) x = dist(rng);
  }
  size_t att_size() const { return size_t(s.B) * s.NH * s.T * s.T; }
  size_t out_size() const { return size_t(s.B) * s.T * s.C; }
  double at(int b, int t, int part, int c) const {
    return widen1(dt, qkv[(size_t(b) * s.T + t) * 3 * s.C + size_t(part) * s.C + c]);
  }
};

struct Forward {
  std::vector<uint16_t> out, att;
};
Forward run_forward(const Problem& p) {
  Forward f{std::vector<uint16_t>(p.out_size(), 0xFFFF),
            std::vector<uint16_t>(p.att_size(), 0xFFFF)};
  attention_forward16(p.dt, f.out.data(), f.att.data(), p.qkv.data(), p.s.B, p.s.T, p.s.C, p.s.NH);
  return f;
}
std::vector<float> run_backward(const Problem& p, const Forward& f, int times = 1) {
  std::vector<float> dqkv(p.qkv.size(), 0.0f);
  for (int i = 0; i < times; ++i) {
    attention_backward16(p.dt, dqkv.data(), p.dout.data(), p.qkv.data(), f.att.data(), p.s.B, p.s.T,
                         p.s.C, p.s.NH);
  }
  return dqkv;
}

// Checks one forward against fp64, entry by entry (the first 5 failures reported).
void check_forward(const Problem& p, const Forward& f) {
  const auto [B, T, C, NH] = p.s;
  const int hs = C / NH;
  const double u = unit_roundoff(p.dt), scale = 1.0 / std::sqrt(double(hs));
  const double tiny = 1e-7;  // fp16's subnormal spacing is 6e-8
  int bad = 0;
  std::vector<double> s64(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const uint16_t* att = f.att.data() + (size_t(b) * NH + h) * T * T;
      for (int t = 0; t < T; ++t) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t; ++j) {
          double d = 0.0;
          for (int c = 0; c < hs; ++c) d += p.at(b, t, 0, h * hs + c) * p.at(b, j, 1, h * hs + c);
          s64[j] = scale * d;
          mx = std::max(mx, s64[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (s64[j] = std::exp(s64[j] - mx));
        for (int j = 0; j < T; ++j) {
          const uint16_t bits = att[size_t(t) * T + j];
          if (j > t) {
            if (bits != 0 && bad++ < 5)
              ADD_FAILURE() << "att not +0 above the diagonal, t=" << t << " j=" << j;
            continue;
          }
          const double p64 = s64[j] / sum, p16 = widen1(p.dt, bits);
          if (!(std::abs(p16 - p64) <= 2 * u * p64 + tiny) && bad++ < 5) {
            ADD_FAILURE() << "att b=" << b << " h=" << h << " t=" << t << " j=" << j << ": " << p16
                          << " vs " << p64;
          }
        }
        for (int c = 0; c < hs; ++c) {
          double o64 = 0.0, mag = 0.0;
          for (int j = 0; j <= t; ++j) {
            const double pv = widen1(p.dt, att[size_t(t) * T + j]) * p.at(b, j, 2, h * hs + c);
            o64 += pv;
            mag += std::abs(pv);
          }
          const double o16 = widen1(p.dt, f.out[(size_t(b) * T + t) * C + h * hs + c]);
          if (!(std::abs(o16 - o64) <= 2 * u * std::abs(o64) + 1e-5 * mag + tiny) && bad++ < 5) {
            ADD_FAILURE() << "out b=" << b << " h=" << h << " t=" << t << " c=" << c << ": " << o16
                          << " vs " << o64;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// Relative L2 error of part (0 q, 1 k, 2 v) of dqkv against the reference.
double rel_l2(const std::vector<float>& got, const std::vector<float>& ref, const Shape& s,
              int part) {
  double num = 0.0, den = 0.0;
  for (size_t row = 0; row < size_t(s.B) * s.T; ++row) {
    for (int c = 0; c < s.C; ++c) {
      const size_t i = row * 3 * s.C + size_t(part) * s.C + c;
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(Attention16, ForwardMatchesFp64Reference) {
  for_each_kernel([] {
    for (const DType dt : kDtypes) {
      for (const Shape& s : kShapes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " B=" + std::to_string(s.B) +
                     " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
                     " NH=" + std::to_string(s.NH));
        const Problem p(dt, s, 7);
        check_forward(p, run_forward(p));
      }
    }
  });
}

// The fp32 op on the widened inputs and the widened stored P is the reference; the only
// differences left are dO and dS rounded to DT.
TEST(Attention16, BackwardMatchesFp32OnWidenedInputs) {
  for_each_kernel([] {
    for (const DType dt : kDtypes) {
      for (const Shape& s : kShapes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " B=" + std::to_string(s.B) +
                     " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
                     " NH=" + std::to_string(s.NH));
        const Problem p(dt, s, 11);
        const Forward f = run_forward(p);
        const std::vector<float> got = run_backward(p, f);
        const std::vector<float> qkv32 = widen(dt, p.qkv), att32 = widen(dt, f.att);
        std::vector<float> ref(p.qkv.size(), 0.0f);
        attention_backward(ref.data(), p.dout.data(), qkv32.data(), att32.data(), s.B, s.T, s.C,
                           s.NH);
        // Measured: about 1.3u for dq and dk (dO and dS rounded), 0.9u for dv (dO only).
        const double bound = 4 * unit_roundoff(dt);
        for (int part = 0; part < 3; ++part) {
          const double e = rel_l2(got, ref, s, part);
          EXPECT_LE(e, bound) << "part "
                              << "qkv"[part];
          RecordProperty(
              std::string(dtype_name(dt)) + "_T" + std::to_string(s.T) + "_d" + "qkv"[part],
              std::to_string(e));
        }
      }
    }
  });
}

// Backward adds into dqkv: two calls on zeros give twice one call (up to the fp32 rounding
// of the second sum).
TEST(Attention16, BackwardAccumulatesIntoDqkv) {
  for (const DType dt : kDtypes) {
    const Problem p(dt, {3, 70, 64, 4}, 5);
    const Forward f = run_forward(p);
    const std::vector<float> once = run_backward(p, f, 1), twice = run_backward(p, f, 2);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < once.size(); ++i) {
      num += (double(twice[i]) - 2.0 * once[i]) * (double(twice[i]) - 2.0 * once[i]);
      den += 4.0 * double(once[i]) * once[i];
    }
    EXPECT_GT(den, 0.0);
    EXPECT_LE(std::sqrt(num / den), 1e-6) << dtype_name(dt);
  }
}

// 1 and 2 OpenMP threads give the same bits in out, att and dqkv, on both kernels.
TEST(Attention16, ThreadCountDoesNotChangeBits) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  for_each_kernel([] {
    for (const DType dt : kDtypes) {
      const Problem p(dt, {3, 70, 128, 4}, 3);
      set_compute_threads(1);
      const Forward f1 = run_forward(p);
      const std::vector<float> d1 = run_backward(p, f1);
      set_compute_threads(2);
      const Forward f2 = run_forward(p);
      const std::vector<float> d2 = run_backward(p, f2);
      EXPECT_EQ(f1.out, f2.out) << dtype_name(dt);
      EXPECT_EQ(f1.att, f2.att) << dtype_name(dt);
      EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(float)), 0) << dtype_name(dt);
    }
  });
  set_compute_threads(saved);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

TEST(Attention16, RejectsFp32AndHeadsThatDoNotDivideC) {
  std::vector<uint16_t> qkv(3 * 64), out(64), att(1);
  std::vector<float> dqkv(3 * 64), dout(64);
  EXPECT_THROW(attention_forward16(DType::f32, out.data(), att.data(), qkv.data(), 1, 1, 64, 1),
               std::invalid_argument);
  EXPECT_THROW(attention_forward16(DType::bf16, out.data(), att.data(), qkv.data(), 1, 1, 64, 3),
               std::invalid_argument);
  EXPECT_THROW(attention_backward16(DType::f32, dqkv.data(), dout.data(), qkv.data(), att.data(), 1,
                                    1, 64, 1),
               std::invalid_argument);
}

}  // namespace
}  // namespace ringstep::cpu
