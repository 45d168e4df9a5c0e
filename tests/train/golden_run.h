// Golden runs: short training runs whose losses, loss scales, final validation loss and
// final parameters must stay bit-identical across refactors. One file per world size
// (tests/train/golden/npN.json) maps a fingerprint of the kernels (fp32 results depend on
// the BLAS kernel set, bf16 on whether gemm16 runs on AMX) to, per case (dtype x recompute
// policy), the bits of every number. A machine whose fingerprint matches an entry must give
// those bits. Any other machine's kernels sum in another order: its numbers are compared
// with every recorded entry within golden_tolerance(), and the discrete outcomes (skipped
// steps, loss scales, optimizer steps) exactly.
//
// RINGSTEP_GOLDEN_RECORD=1 writes this machine's entry instead of comparing, keeping the
// other fingerprints' (only when the numbers are meant to change, or for a new kernel set;
// say why in the commit).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/cpu/blas_env.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm.h"
#include "core/dtype.h"
#include "train/trainer.h"

namespace ringstep::testing {

struct GoldenCase {
  const char* dtype;
  const char* recompute;
  const char* name;
  std::vector<std::string> extra;  // more overrides
};

inline const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> kCases = {
      {"fp32", "none", "fp32/none", {}},
      {"fp32", "full", "fp32/full", {}},
      {"bf16", "none", "bf16/none", {}},
      {"bf16", "full", "bf16/full", {}},
      {"fp16", "none", "fp16/none", {}},
      {"fp16", "full", "fp16/full", {}},
      // The loss scaler's skip path (2^24 overflows fp16 at first) and selective recompute.
      {"fp16",
       "selective",
       "fp16/selective/overflow",
       {"precision.loss_scale.initial=16777216", "precision.loss_scale.growth_interval=2"}},
  };
  return kCases;
}

// 4 x 160 tokens per micro-batch (640 rows: more than one of the 16-bit path's row
// blocks), 2 layers of width 32, 5 steps of 2 micro-batches, one thread, a fixed peak.
inline Config golden_config(const GoldenCase& c, const std::string& out_dir) {
  std::vector<std::string> overrides = {"model.vocab_size=64",
                                        "model.seq_len=160",
                                        "model.d_model=32",
                                        "model.n_layers=2",
                                        "model.n_heads=2",
                                        "train.steps=5",
                                        "train.micro_batch=4",
                                        "train.grad_accum_steps=2",
                                        "train.warmup_steps=1",
                                        "train.eval_every=0",
                                        "train.eval_batches=1",
                                        "run.threads=1",
                                        "profile.peak_gflops=100",
                                        "run.out_dir=" + out_dir,
                                        std::string("precision.dtype=") + c.dtype,
                                        std::string("recompute.policy=") + c.recompute};
  overrides.insert(overrides.end(), c.extra.begin(), c.extra.end());
  return parse_config("", "golden", overrides);
}

inline std::string golden_fingerprint() {
  // sgemm's kernel only when it is not OpenBLAS's, so that keys recorded before our kernel
  // existed still name OpenBLAS runs (RINGSTEP_SGEMM=openblas).
  const std::string sgemm =
      cpu::sgemm_runs_ours() ? std::string("; sgemm ") + cpu::sgemm_kernel() : "";
  return blas_description() + sgemm + "; bf16 " + cpu::gemm16_kernel(DType::bf16) + "; fp16 " +
         cpu::gemm16_kernel(DType::f16);
}

inline std::string hex_bits(uint64_t bits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(bits));
  return buf;
}
inline std::string hex_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return hex_bits(b);
}
inline std::string hex_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return hex_bits(b);
}

// Every number of an outcome as exact bits (and the values, for a reader of the file).
inline nlohmann::ordered_json golden_record(const TrainOutcome& r) {
  nlohmann::ordered_json j, losses = nlohmann::ordered_json::array(),
                            scales = nlohmann::ordered_json::array();
  for (float l : r.losses) losses.push_back(hex_of(l));
  for (double s : r.loss_scales) scales.push_back(hex_of(s));
  j["losses"] = losses;
  j["loss_scales"] = scales;
  j["final_val_loss"] = hex_of(r.final_val_loss);
  j["params_fnv1a64"] = hex_bits(r.params_fnv1a64);
  j["params_l2"] = hex_of(r.params_l2);
  j["skipped_steps"] = r.skipped_steps;
  j["optimizer_steps"] = r.optimizer_steps;
  j["readable"] = {{"first_loss", r.losses.empty() ? 0.0f : r.losses.front()},
                   {"last_loss", r.losses.empty() ? 0.0f : r.losses.back()},
                   {"final_val_loss", r.final_val_loss},
                   {"params_l2", r.params_l2}};
  return j;
}

// The relative difference allowed between two kernel sets' losses and parameter norms after
// a golden run, by the dtype the products take (the case name starts with it). Another
// kernel set reorders each product's sum: an fp32 dot product of K <= 512 terms moves by at
// most about sqrt(K) u = 1.4e-6 (u = 2^-24) as a random walk, and a loss that averages
// thousands of tokens moves less; 1e-5 is that bound with room for 5 steps of compounding
// (the 11 recorded kernel sets agree to 1.2e-7). With 16-bit activations a reordering flips
// the rounding of an element that lies near a rounding boundary, by one 16-bit ulp; fewer
// than 1 in 16 elements lie that near, so a mean moves by at most ulp/16: 2^-8/16 = 2.4e-4
// for bf16 (recorded sets: 3.9e-5), 2^-11/16 = 3.1e-5 for fp16 (recorded: 1.4e-5).
inline double golden_tolerance(const std::string& case_name) {
  if (case_name.starts_with("bf16")) return 2.4e-4;
  if (case_name.starts_with("fp16")) return 3.1e-5;
  return 1e-5;
}

// The value of a golden entry's hex field: a float's bits (hex_of(float): the upper 32 bits
// are zero, which no double recorded here has: it would be a denormal) or a double's.
inline double golden_value(const nlohmann::ordered_json& hex) {
  const uint64_t bits = std::stoull(hex.get<std::string>(), nullptr, 16);
  if (bits >> 32 == 0) {
    float f;
    const uint32_t b = uint32_t(bits);
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// GOT (this machine's case NAME) against an entry WANT of another kernel set: losses, the
// final validation loss and (where WANT has it) the parameter norm within golden_tolerance,
// the discrete outcomes exactly.
inline void expect_near_golden(const std::string& name, const nlohmann::ordered_json& want,
                               const nlohmann::ordered_json& got, const std::string& against) {
  const double tol = golden_tolerance(name);
  auto near = [&](const nlohmann::ordered_json& w, const nlohmann::ordered_json& g,
                  const std::string& what) {
    const double a = golden_value(w), b = golden_value(g);
    EXPECT_LE(std::fabs(a - b), tol * std::fabs(a))
        << name << " " << what << ": " << b << " here, " << a << " for [" << against
        << "] (relative tolerance " << tol << ")";
  };
  ASSERT_EQ(want["losses"].size(), got["losses"].size()) << name;
  for (size_t i = 0; i < want["losses"].size(); ++i)
    near(want["losses"][i], got["losses"][i], "loss of step " + std::to_string(i + 1));
  near(want["final_val_loss"], got["final_val_loss"], "final val loss");
  if (want.contains("params_l2")) near(want["params_l2"], got["params_l2"], "parameter L2 norm");
  for (const char* exact : {"loss_scales", "skipped_steps", "optimizer_steps"})
    EXPECT_EQ(want[exact], got[exact]) << name << " " << exact << " vs [" << against << "]";
}

inline std::filesystem::path golden_file(int world) {
  return std::filesystem::path(RINGSTEP_SOURCE_DIR) / "tests/train/golden" /
         ("np" + std::to_string(world) + ".json");
}

// Runs every case on COMM (null: one rank) and compares with (or, when recording, writes)
// the world size's golden file. Only rank 0 reads or writes the file.
inline void check_goldens(Communicator* comm, int rank, int world) {
  const bool record = std::getenv("RINGSTEP_GOLDEN_RECORD") != nullptr;
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("ringstep_golden_np" + std::to_string(world) + "_" + std::to_string(::getpid()));
  nlohmann::ordered_json got;
  for (const GoldenCase& c : golden_cases()) {
    const std::string name = c.name;
    got[name] = golden_record(train(golden_config(c, (out / name).string()), comm));
  }
  if (rank != 0) return;
  std::filesystem::remove_all(out);
  const std::string fingerprint = golden_fingerprint();
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  if (std::ifstream in(golden_file(world)); in)
    all = nlohmann::ordered_json::parse(in);
  else
    ASSERT_TRUE(record) << "no golden file " << golden_file(world)
                        << "; record it with RINGSTEP_GOLDEN_RECORD=1";
  if (record) {
    all[fingerprint] = got;
    std::ofstream(golden_file(world)) << all.dump(2) << "\n";
    GTEST_SKIP() << "recorded " << fingerprint << " in " << golden_file(world);
  }
  if (!all.contains(fingerprint)) {
    std::printf("no goldens for this machine's kernels [%s] in %s: comparing within the "
                "tolerance of summation order with each of the %zu recorded kernel sets "
                "(record this one with RINGSTEP_GOLDEN_RECORD=1)\n",
                fingerprint.c_str(), golden_file(world).c_str(), all.size());
    for (const auto& [fp, cases] : all.items())
      for (const auto& [name, want] : cases.items()) expect_near_golden(name, want, got[name], fp);
    return;
  }
  // Bit for bit, every field the entry records (entries recorded before a field existed
  // lack it).
  for (const auto& [name, rec] : all[fingerprint].items())
    for (const auto& [field, value] : rec.items())
      if (field != "readable")
        EXPECT_EQ(value.dump(), got[name][field].dump()) << name << " " << field
                                                         << " differs from the golden";
}

}  // namespace ringstep::testing
