#include "train/preflight.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "models/device_shaped_runtime.h"
#include "models/gpt.h"
#include "train/report.h"

namespace ringstep {
namespace {

std::string error_of(const Config& cfg, const MachineLimits& machine) {
  try {
    check_fits_machine(cfg, machine);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Four floats per element of the model's flat buffers (what Gpt allocates), plus activations.
TEST(Preflight, MemoryIsFourFloatsPerParameterPlusActivations) {
  Config cfg;
  EXPECT_EQ(memory_estimate_bytes(cfg),
            16 * double(Gpt(cfg.model).params().size()) + activation_estimate_bytes(cfg));
}

// The parts the log header's memory line names, summing to what the preflight compares.
TEST(Preflight, MemoryEstimateSplitsIntoParameterStateAndActivations) {
  Config cfg;
  const MemoryEstimate m = memory_estimate(cfg);
  EXPECT_EQ(m.params_bytes, 4 * double(Gpt(cfg.model).params().size()));
  EXPECT_EQ(m.grads_bytes, m.params_bytes);
  EXPECT_EQ(m.optimizer_bytes, 2 * m.params_bytes);
  EXPECT_EQ(m.activations_bytes, activation_estimate_bytes(cfg));
  EXPECT_EQ(m.total_bytes(), memory_estimate_bytes(cfg));
}

// On cuda the activations are what the model's counting pass allocates on a device runtime
// with the cuda backend's attention state (one fp32 LSE per query row, not the T x T
// probabilities): exact in fp32, below the CPU's estimate.
TEST(Preflight, OnCudaTheActivationsAreWhatTheCountingArenaAllocates) {
  Config cfg;
  cfg.run.device = Device::cuda;
  cfg.model.pad_vocab_to_multiple = 128;
  DeviceShapedRuntime rt(/*cuda_state=*/true);
  Gpt model(cfg.model, gpt_options(cfg), rt);
  const MemoryEstimate m = memory_estimate(cfg);
  EXPECT_EQ(m.activations_bytes,
            double(model.count_arena_bytes(cfg.train.micro_batch, cfg.model.seq_len)));
  EXPECT_EQ(m.params_bytes, 4 * double(model.params().size()));
  Config on_cpu = cfg;
  on_cpu.run.device = Device::cpu;
  EXPECT_LT(m.activations_bytes, memory_estimate(on_cpu).activations_bytes);
}

TEST(Preflight, RefusesAModelLargerThanRamBeforeBuildingIt) {
  Config cfg;
  cfg.model.n_layers = 65536;
  cfg.model.d_model = 65536;
  const std::string msg = error_of(cfg, {double(1 << 30), 2});
  EXPECT_NE(msg.find("needs "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" GiB, this machine has 1.0 GiB"), std::string::npos) << msg;
  EXPECT_EQ(error_of(Config{}, {double(1 << 30), 2}), "");
  // On a GPU the model must fit the GPU's memory, and the message says so.
  EXPECT_NE(error_of(cfg, {double(1 << 30), 2, "the GPU (NVIDIA H200)"})
                .find(", the GPU (NVIDIA H200) has 1.0 GiB"),
            std::string::npos);
}

TEST(Preflight, RefusesMoreThanFourThreadsPerCore) {
  Config cfg;
  cfg.run.threads = 9;
  EXPECT_EQ(error_of(cfg, {0, 2}),
            "'run.threads' is 9, more than 4 x the 2 cores this rank may use; set it lower or to "
            "auto");
  cfg.run.threads = 8;
  EXPECT_EQ(error_of(cfg, {0, 2}), "");
}

}  // namespace
}  // namespace ringstep
