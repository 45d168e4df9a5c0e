// GradSync's device path (comm.backend: nccl; comm/device_comm.h) on the CPU, through a host
// fake of the device communicator (fake_device_comm.h), on 2, 3 and 4 ranks: buckets queued
// on the comm stream as backward finishes them, the compute stream's one wait before the
// optimizer, the step's comm from the marks. It gives the host (MPI) path's bits, bucket by
// bucket and through the whole trainer, and its records keep comm in flight >= exposed comm.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/registry.h"
#include "core/runtime.h"
#include "models/gpt_spec.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "train/fake_device_comm.h"
#include "train/grad_sync.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

using testing::FakeDeviceComm;
using testing::world;

// Backward's hook calls for SPEC's units, in backward order, the embeddings' last.
void run_hook(const std::function<void(int)>& hook, const GptSpec& spec) {
  if (!hook) return;
  for (int unit = 0; unit <= spec.embedding_unit(); ++unit) hook(unit);
}

// Rounding-sensitive gradients (wavy values): the device path's mean equals the host path's
// bit for bit, by both algorithms, with and without overlap. With overlap, every bucket but
// the embeddings' is on the comm stream before finish(), in backward order; the compute
// stream waits once per step; comm (the union of the spans from ready to end) is at least the
// exposed comm, and the bytes are the buffer's.
TEST(DeviceCommPath, BucketsGiveTheHostPathsBits) {
  auto& comm = world();
  const GptSpec spec(ModelConfig{37, 8, 16, 3, 2});
  const size_t n = spec.registry().total_numel();
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::native}) {
    for (bool overlap : {true, false}) {
      const std::string what = std::string(name(algo)) + (overlap ? " overlap" : " no overlap");
      CommConfig cfg;
      cfg.bucket_mb = 0.004;  // several buckets
      cfg.allreduce = algo;
      cfg.overlap = overlap;
      FlatBuffer host_grads(n), device_grads(n);
      for (size_t i = 0; i < n; ++i)
        host_grads.data()[i] = device_grads.data()[i] = testing::wavy_value(comm.rank(), i);

      GradSync host(&comm, cfg);
      host.setup(host_grads, spec);
      run_hook(host.unit_hook(), spec);
      host.finish();

      FakeDeviceComm dev;
      GradSync sync(&comm, cfg, 1, &dev);
      sync.setup(device_grads, spec);
      const std::vector<Bucket>& buckets = sync.buckets();
      ASSERT_GT(buckets.size(), 2u) << what;
      ASSERT_EQ(dev.reserved.size(), buckets.size()) << what << ": scratch made at setup";
      for (size_t b = 0; b < buckets.size(); ++b)
        EXPECT_EQ(dev.reserved[b], buckets[b].end - buckets[b].begin) << what;
      const std::function<void(int)> hook = sync.unit_hook();
      ASSERT_EQ(bool(hook), overlap) << what;
      for (int step = 0; step < 2; ++step) {  // a second step: the marks start afresh
        if (step == 1)
          for (size_t i = 0; i < n; ++i)
            device_grads.data()[i] = testing::wavy_value(comm.rank(), i);
        run_hook(hook, spec);
        const int64_t finish_called = steady_now_ns();
        GradSync::Result r = sync.finish();
        EXPECT_EQ(dev.compute_waits, step + 1) << what;
        EXPECT_EQ(r.bytes, n * sizeof(float)) << what;
        EXPECT_TRUE(r.spans.empty()) << what << ": times come from settle()";
        ASSERT_TRUE(sync.settle(r)) << what;
        EXPECT_EQ(std::memcmp(device_grads.data(), host_grads.data(), n * sizeof(float)), 0)
            << what << " step " << step;
        ASSERT_EQ(r.spans.size(), buckets.size()) << what;
        for (size_t b = 0; b < buckets.size(); ++b) {
          EXPECT_EQ(r.spans[b].tag, b) << what;  // backward order
          EXPECT_EQ(r.spans[b].bytes, (buckets[b].end - buckets[b].begin) * sizeof(float));
          EXPECT_LE(r.spans[b].queued_ns, r.spans[b].start_ns);
          EXPECT_LE(r.spans[b].start_ns, r.spans[b].end_ns);
          const bool before_finish = r.spans[b].queued_ns < finish_called;
          EXPECT_EQ(before_finish, overlap && buckets[b].last_unit < spec.embedding_unit()) << what << " bucket " << b;
        }
        EXPECT_GT(r.comm_ms, 0) << what;
        EXPECT_GE(r.comm_ms, r.exposed_ms) << what;
        EXPECT_GE(r.exposed_ms, 0) << what;
      }
    }
  }
}

// One rank's device path (a single NCCL rank; here a fake over MPI_COMM_SELF, GradSync
// without a host communicator): a mean over one rank leaves the gradients as they are, bit
// for bit, by both algorithms, and the path still runs: the hook queues the buckets, the
// compute stream waits once, every bucket has its span.
TEST(DeviceCommPath, OneRankLeavesTheGradientsAsTheyAre) {
  const GptSpec spec(ModelConfig{37, 8, 16, 3, 2});
  const size_t n = spec.registry().total_numel();
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::native}) {
    CommConfig cfg;
    cfg.bucket_mb = 0.004;
    cfg.allreduce = algo;
    FlatBuffer grads(n);
    std::vector<float> before(n);
    for (size_t i = 0; i < n; ++i) before[i] = grads.data()[i] = testing::wavy_value(0, i);
    FakeDeviceComm dev(MPI_COMM_SELF);
    GradSync sync(nullptr, cfg, 1, &dev);
    sync.setup(grads, spec);
    EXPECT_EQ(sync.world(), 1);
    const std::function<void(int)> hook = sync.unit_hook();
    ASSERT_TRUE(hook);
    run_hook(hook, spec);
    GradSync::Result r = sync.finish();
    ASSERT_TRUE(sync.settle(r));
    EXPECT_EQ(dev.compute_waits, 1);
    EXPECT_EQ(r.spans.size(), sync.buckets().size());
    EXPECT_EQ(r.sent_bytes, 0u);  // nothing leaves a single rank
    EXPECT_GE(r.comm_ms, r.exposed_ms);
    EXPECT_EQ(std::memcmp(grads.data(), before.data(), n * sizeof(float)), 0) << name(algo);
  }
}

// The trainer on the device path (the fake) equals the trainer on the host path: the same
// losses and final parameters bit for bit; every step record has comm > 0 and
// comm >= comm_exposed, and the traced step's comm lane has one span per bucket.
TEST(DeviceCommPath, TrainerMatchesTheHostPath) {
  auto& comm = world();
  const auto dir = testing::fresh_dir(comm, "devcomm", "trainer");
  Config cfg = testing::SmallRun((dir / "host").string(), 5);
  cfg.comm.bucket_mb = 0.01;
  cfg.profile.trace_steps = {3, 3};
  const TrainOutcome host = train(cfg, &comm);
  cfg.run.out_dir = (dir / "device").string();
  FakeDeviceComm dev;
  const TrainOutcome device = train(cfg, &comm, &dev);
  EXPECT_EQ(dev.compute_waits, cfg.train.steps);
  ASSERT_EQ(device.losses.size(), host.losses.size());
  for (size_t i = 0; i < host.losses.size(); ++i)
    EXPECT_EQ(device.losses[i], host.losses[i]) << "step " << i + 1;
  EXPECT_EQ(device.params_fnv1a64, host.params_fnv1a64);
  comm.barrier();
  if (comm.rank() != 0) return;
  std::ifstream steps(dir / "device" / "steps.jsonl");
  std::string line;
  int records = 0;
  while (std::getline(steps, line)) {
    const auto rec = nlohmann::json::parse(line);
    const auto& t = rec["time_ms"];
    EXPECT_GT(t["comm"].get<double>(), 0) << line;
    EXPECT_LE(t["comm_exposed"].get<double>(), t["comm"].get<double>()) << line;
    EXPECT_GT(rec["comm_bytes"].get<double>(), 0) << line;
    ++records;
  }
  EXPECT_EQ(records, cfg.train.steps);
  const auto trace = nlohmann::json::parse(std::ifstream(dir / "device" / "trace" / "rank-0.json"));
  int comm_spans = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"].get<int>() == 1 &&
        e["name"].get<std::string>().rfind("allreduce bucket", 0) == 0)
      ++comm_spans;
  EXPECT_GT(comm_spans, 1);
}

// One rank on the device path (what a single NCCL rank runs) equals the run without any
// communication: the same losses and final parameters, bit for bit.
TEST(DeviceCommPath, OneRankTrainerMatchesTheRunWithoutComm) {
  auto& comm = world();
  const auto dir = testing::fresh_dir(comm, "devcomm", "one_rank");
  const std::string mine = "rank" + std::to_string(comm.rank());
  Config cfg = testing::SmallRun((dir / (mine + "_plain")).string(), 4);
  cfg.comm.bucket_mb = 0.01;
  const TrainOutcome plain = train(cfg, nullptr);
  cfg.run.out_dir = (dir / (mine + "_device")).string();
  FakeDeviceComm dev(MPI_COMM_SELF);
  const TrainOutcome device = train(cfg, nullptr, &dev);
  EXPECT_EQ(dev.compute_waits, cfg.train.steps);
  EXPECT_EQ(device.losses, plain.losses);
  EXPECT_EQ(device.params_fnv1a64, plain.params_fnv1a64);
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
