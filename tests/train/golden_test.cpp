// One rank: losses and final parameters bit-identical to the recorded goldens where this
// machine's kernels are recorded, within the tolerance of summation order elsewhere
// (tests/train/golden_run.h says what is recorded and how each is compared).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "train/golden_run.h"

namespace ringstep {
namespace {

using ringstep::testing::expect_near_golden;
using ringstep::testing::golden_tolerance;
using ringstep::testing::hex_of;

TEST(Golden, OneRankRunsAreBitIdenticalToTheGoldens) {
  ringstep::testing::check_goldens(nullptr, 0, 1);
}

// An entry whose losses are LOSS and LOSS * (1 + REL), parameter norm 10.
nlohmann::ordered_json Entry(float loss, double rel) {
  nlohmann::ordered_json j;
  j["losses"] = {hex_of(loss), hex_of(float(loss * (1 + rel)))};
  j["loss_scales"] = {hex_of(1.0), hex_of(1.0)};
  j["final_val_loss"] = hex_of(loss);
  j["params_l2"] = hex_of(10.0);
  j["skipped_steps"] = 0;
  j["optimizer_steps"] = 2;
  return j;
}

// The tolerance comparison passes within the bound and fails beyond it, per dtype, and a
// discrete outcome must match exactly.
TEST(Golden, OtherKernelsAreHeldToTheToleranceOfSummationOrder) {
  for (const char* name : {"fp32/none", "bf16/full", "fp16/none"}) {
    const double tol = golden_tolerance(name);
    const auto want = Entry(4.0f, 0.0);
    expect_near_golden(name, want, Entry(4.0f, 0.5 * tol), "ref");
    EXPECT_NONFATAL_FAILURE(expect_near_golden(name, want, Entry(4.0f, 3 * tol), "ref"),
                            "loss of step 2");
    auto skipped = Entry(4.0f, 0.0);
    skipped["skipped_steps"] = 1;
    EXPECT_NONFATAL_FAILURE(expect_near_golden(name, want, skipped, "ref"), "skipped_steps");
  }
  EXPECT_LT(golden_tolerance("fp32/none"), golden_tolerance("fp16/none"));
  EXPECT_LT(golden_tolerance("fp16/none"), golden_tolerance("bf16/none"));
}

}  // namespace
}  // namespace ringstep
