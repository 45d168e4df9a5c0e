// GradSync's device path (comm.backend: nccl; comm/device_comm.h) on the CPU, through a host
// fake of the device communicator (fake_device_comm.h), on 2, 3 and 4 ranks: buckets queued
// on the comm stream as backward finishes them, the compute stream's one wait before the
// optimizer, the step's comm from the marks. It gives the host (MPI) path's bits, bucket by
// bucket and through the whole trainer, and its records keep comm in flight >= exposed comm.
// 1-bit Adam's exchange through the same path (DeviceSignAllreduce per bucket, the kernels'
// CPU twins) gives the host path's bits too, and so does a whole 1-bit Adam run, its
// momentum formed and its update made by the runtime's passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "core/runtime.h"
#include "models/gpt_spec.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "train/checkpoint_run.h"
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
          EXPECT_EQ(before_finish, overlap && buckets[b].last_unit < spec.embedding_unit())
              << what << " bucket " << b;
        }
        EXPECT_GT(r.comm_ms, 0) << what;
        EXPECT_GE(r.comm_ms, r.exposed_ms) << what;
        EXPECT_GE(r.exposed_ms, 0) << what;
      }
    }
  }
}

// 1-bit Adam's exchange through GradSync's device path (Reducer::sign_average on a
// DeviceComm: one DeviceSignAllreduce per bucket on the comm stream, here with the kernels'
// CPU twins over the fake) gives the host path's bits call after call: the mean, both
// error buffers and the bytes sent, with and without the unit hook starting buckets under
// backward, one scale per tensor and scale blocks; every element is prepared once and
// finished once. An abandoned exchange (no FINISH) leaves BUF as it was and the error
// buffers as the host path's.
TEST(DeviceCommPath, SignAverageGivesTheHostPathsBits) {
  auto& comm = world();
  const GptSpec spec(ModelConfig{37, 8, 16, 3, 2});
  const size_t n = spec.registry().total_numel();
  for (bool overlap : {true, false}) {
    for (const SignCode code :
         {SignCode{OneBitScale::mean_abs, 0}, SignCode{OneBitScale::l2, 64}}) {
      const std::string what = std::string(overlap ? "overlap, " : "no overlap, ") +
                               std::string(name(code.scale)) + " block " +
                               std::to_string(code.block);
      CommConfig cfg;
      cfg.bucket_mb = 0.004;  // several buckets
      cfg.overlap = overlap;
      FlatBuffer grads_host(n), grads_device(n);
      GradSync host(&comm, cfg);
      host.setup(grads_host, spec);
      FakeDeviceComm dev;
      GradSync sync(&comm, cfg, 1, &dev);
      sync.setup(grads_device, spec);
      ASSERT_GT(sync.buckets().size(), 2u) << what;
      std::vector<float> ew_host(n, 0.0f), es_host(n, 0.0f), ew(n, 0.0f), es(n, 0.0f);
      for (int call = 0; call < 4; ++call) {
        const bool abandon = call == 2;
        std::vector<float> buf_host(n);
        for (size_t i = 0; i < n; ++i) buf_host[i] = testing::wavy_value(comm.rank() + call, i);
        std::vector<float> buf = buf_host;
        std::vector<int> prepared(n, 0), finished(n, 0);
        auto count_into = [](std::vector<int>& seen) {
          return [&seen](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) ++seen[i];
          };
        };
        host.begin_sign_average(buf_host.data(), ew_host.data(), es_host.data(), n, code, {});
        run_hook(host.unit_hook(), spec);
        const SignExchange want =
            host.finish_sign_average(abandon ? Reducer::Part{} : [](size_t, size_t) {});
        sync.begin_sign_average(buf.data(), ew.data(), es.data(), n, code, count_into(prepared));
        run_hook(sync.unit_hook(), spec);
        const SignExchange got =
            sync.finish_sign_average(abandon ? Reducer::Part{} : count_into(finished));
        EXPECT_EQ(got.bytes_sent, want.bytes_sent) << what;
        EXPECT_EQ(std::memcmp(buf.data(), buf_host.data(), n * sizeof(float)), 0)
            << what << ", call " << call;
        EXPECT_EQ(std::memcmp(ew.data(), ew_host.data(), n * sizeof(float)), 0)
            << what << ", call " << call;
        EXPECT_EQ(std::memcmp(es.data(), es_host.data(), n * sizeof(float)), 0)
            << what << ", call " << call;
        EXPECT_EQ(std::count(prepared.begin(), prepared.end(), 1), std::ptrdiff_t(n)) << what;
        EXPECT_EQ(std::count(finished.begin(), finished.end(), abandon ? 0 : 1), std::ptrdiff_t(n))
            << what;
      }
    }
  }
}

// A DeviceComm's sign_average reads BUF: an INPUT is refused, as a logic error.
TEST(DeviceCommPath, SignAverageRefusesAnInput) {
  const GptSpec spec(ModelConfig{37, 8, 16, 3, 2});
  const size_t n = spec.registry().total_numel();
  FlatBuffer grads(n);
  FakeDeviceComm dev;
  GradSync sync(&world(), CommConfig{}, 1, &dev);
  sync.setup(grads, spec);
  std::vector<float> buf(n), ew(n), es(n);
  EXPECT_THROW(sync.begin_sign_average(buf.data(), ew.data(), es.data(), n, SignCode{}, {},
                                       [](size_t, size_t, float*) {}),
               std::logic_error);
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

// The step records of RUN: (stage, skipped) of each step.
std::vector<std::pair<std::string, bool>> stages_of(const std::filesystem::path& run) {
  std::vector<std::pair<std::string, bool>> out;
  std::ifstream in(run / "steps.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto rec = nlohmann::json::parse(line);
    out.emplace_back(rec.value("stage", ""), rec["skipped"].get<bool>());
  }
  return out;
}

// 1-bit Adam on the device path (the fake; what comm.backend nccl runs on cuda) equals it on
// the host path: the same losses, loss scales and final parameters bit for bit, through the
// warm-up (AdamW on buckets averaged on the comm stream) and the compression stage (each
// bucket's momentum formed into m by the runtime's pass in PREPARE, exchanged by
// DeviceSignAllreduce, the update by the runtime's pass in FINISH), with clipping and
// weight decay, the exchange under backward and after it. With fp16's dynamic loss scale,
// overflows skipped in the compression stage put m and both error buffers back as the host
// path does (m, overwritten by the momentum there, from its kept copy).
TEST(DeviceCommPath, OneBitAdamMatchesTheHostPath) {
  auto& comm = world();
  struct Case {
    const char* name;
    bool overlap, fp16;
    int steps;
  };
  for (const Case c : {Case{"after", false, false, 8}, Case{"under", true, false, 8},
                       Case{"fp16_under", true, true, 30}}) {
    const auto dir = testing::fresh_dir(comm, "devcomm", std::string("onebit_") + c.name);
    Config cfg = testing::SmallRun((dir / "host").string(), c.steps);
    cfg.optimizer.name = OptimizerKind::onebit_adam;
    cfg.optimizer.onebit.freeze_step = 3;
    cfg.optimizer.onebit.compress = OneBitCompress::always;
    cfg.optimizer.onebit.overlap = c.overlap;
    cfg.comm.bucket_mb = 0.01;  // several buckets, each with several tensors
    cfg.train.grad_clip = 0.5;  // clipping active in the compression stage too
    cfg.train.weight_decay = 0.1;
    if (c.fp16) cfg = testing::Fp16Dynamic(cfg);
    const TrainOutcome host = train(cfg, &comm);
    cfg.run.out_dir = (dir / "device").string();
    FakeDeviceComm dev;
    const TrainOutcome device = train(cfg, &comm, &dev);
    EXPECT_EQ(device.losses, host.losses) << c.name;
    EXPECT_EQ(device.loss_scales, host.loss_scales) << c.name;
    EXPECT_EQ(device.skipped_steps, host.skipped_steps) << c.name;
    EXPECT_EQ(device.optimizer_steps, host.optimizer_steps) << c.name;
    EXPECT_EQ(device.params_fnv1a64, host.params_fnv1a64) << c.name;
    comm.barrier();
    if (comm.rank() != 0) continue;
    const auto stages = stages_of(dir / "device");
    EXPECT_EQ(stages, stages_of(dir / "host")) << c.name;
    int compressed = 0, skipped_compressed = 0;
    for (const auto& [stage, skipped] : stages)
      if (stage == "compressed") ++(skipped ? skipped_compressed : compressed);
    EXPECT_GE(compressed, 3) << c.name << ": compressed steps applied";
    if (c.fp16) EXPECT_GT(skipped_compressed, 0) << "no overflow fell in the compression stage";
  }
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
