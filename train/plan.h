// `ringstep plan`: a training step predicted before it runs (docs/plan.md). Compute from the
// model's spec (models/gpt_spec.h): each op's time is max(FLOPs / peak, bytes / bandwidth)
// divided by an efficiency of its op class, fitted from a run's op-timed steps
// (calibrate()). Communication from an alpha-beta model of the AllReduce (Thakur,
// Rabenseifner & Gropp 2005), bucket by bucket with the engine's FIFO overlap against
// backward, hierarchical (intra-node then inter-node) on multi-node shapes, and 1-bit Adam's
// compressed exchange. Memory per rank from the spec. Pure functions: nothing is allocated,
// run or read but what the caller passes.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device.h"
#include "core/enum_names.h"
#include "core/op_profile.h"
#include "optim/optimizer.h"  // OneBitStage

namespace ringstep {

// Ops grouped by what bounds them and how well their kernels reach the bound.
enum class OpClass : uint8_t { matmul, attention, elementwise, optimizer };
constexpr auto enum_names(OpClass) {
  return std::to_array<EnumName<OpClass>>({{OpClass::matmul, "matmul"},
                                           {OpClass::attention, "attention"},
                                           {OpClass::elementwise, "elementwise"},
                                           {OpClass::optimizer, "optimizer"}});
}
inline constexpr size_t kOpClassCount = enum_names(OpClass{}).size();
OpClass op_class(Op op);

// One accelerator (or this CPU) as the compute model sees it, per rank.
struct PlanDevice {
  std::string name;
  Device kind = Device::cpu;     // whose attention state and kernels the spec assumes
  double peak_gflops = 0;        // dense, of the config's product dtype, per rank
  double mem_bandwidth_gbs = 0;  // per rank
  double memory_bytes = 0;       // per rank
  // Achieved / bound time per op class (1 = at the roofline).
  std::array<double, kOpClassCount> efficiency{};
  double step_overhead_ms = 0;  // per step, outside the ops (data, bookkeeping)
  std::string source;           // where the numbers come from
};

// A link as the alpha-beta model sees it: ALPHA per message, BUSBW_GBS the rate a rank's
// link carries (nccl-tests' busbw).
struct LinkModel {
  double alpha_us = 0;
  double busbw_gbs = 0;
  std::string source;
};

enum class AllreduceAlgorithm : uint8_t { ring, recursive_doubling, rabenseifner, hierarchical };
constexpr auto enum_names(AllreduceAlgorithm) {
  return std::to_array<EnumName<AllreduceAlgorithm>>(
      {{AllreduceAlgorithm::ring, "ring"},
       {AllreduceAlgorithm::recursive_doubling, "recursive_doubling"},
       {AllreduceAlgorithm::rabenseifner, "rabenseifner"},
       {AllreduceAlgorithm::hierarchical, "hierarchical"}});
}

// Milliseconds of one AllReduce of BYTES over RANKS on LINK (Thakur et al. 2005, sec. 4):
// ring 2(p-1) a + 2 (p-1)/p n b; recursive doubling log2(p) (a + n b); Rabenseifner
// (reduce-scatter by halving, allgather by doubling) 2 log2(p) a + 2 (p-1)/p n b.
// 0 for one rank.
double allreduce_ms(AllreduceAlgorithm algo, double bytes, int ranks, const LinkModel& link);
// Intra-node reduce-scatter over G ranks, AllReduce of each rank's 1/G over the nodes (each
// rank on its own NIC), intra-node allgather.
double hierarchical_allreduce_ms(double bytes, int ranks, int per_node, const LinkModel& intra,
                                 const LinkModel& inter);

// What shows of the sharded optimizer's parameter allgather of ALLGATHER_MS before the next
// step's forwards need it (Megatron's --overlap-param-gather), FORWARD_MS being a
// micro-batch's forward on the stage. One stage: it runs under the first forward, layer by
// layer. PP stages of VP chunks: the last stage idles through the pipeline's fill (pp - 1
// chunk forwards), then chunk j first runs after j pp more; each chunk's 1/vp of the
// allgather must be done by then, and the latest shows.
double allgather_exposed_ms(double allgather_ms, double forward_ms, int pp, int vp);

// Model parallelism as Megatron-LM lays it out (Narayanan et al. 2021), which the plan
// models and ringstep's trainer does not run. TENSOR ranks of one node split every block's
// products (with sequence parallelism, so that each of a block's AllReduces of B x T x C
// activations is a reduce-scatter and an allgather: the same bytes); PIPELINE stages split
// the blocks, each rank holding VIRTUAL_STAGES chunks of the interleaved 1F1B schedule; the
// ranks left over are data-parallel replicas. Rank order: tensor, then data, then pipeline.
// DISTRIBUTED_OPTIMIZER shards the optimizer over the replicas (ZeRO stage 1, Megatron's
// distributed optimizer): each replica reduce-scatters the fp32 gradients, updates its 1/d,
// and allgathers the parameters (in the storage dtype) before the next step's forwards need
// them (allgather_exposed_ms). With interleaving each chunk's gradients start their
// exchange as that chunk's last backward ends, in the drain. TENSOR_COMM_OVERLAP
// (Transformer Engine's tp-comm-overlap) hides each of tensor parallelism's collectives
// under the product beside it, as far as that product lasts.
struct ModelParallel {
  int tensor = 1, pipeline = 1, virtual_stages = 1;
  bool distributed_optimizer = false;
  bool tensor_comm_overlap = false;
  int model_ranks() const { return tensor * pipeline; }
};

// Where the ranks run.
struct PlanCluster {
  int ranks = 1;
  int per_node = 1;  // ranks sharing the intra-node link
  ModelParallel parallel;
  LinkModel intra, inter;
  // The algorithm the run uses; absent, the fastest of the model's for each bucket.
  bool fixed_algorithm = false;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring;
};

// One stage of a 0/1 Adam run (OneBitStage): how many of the run's steps it holds, and one
// such step's parts, per rank, in milliseconds.
struct StagePrediction {
  int steps = 0;
  double step_ms = 0, optimizer_ms = 0, comm_ms = 0, comm_exposed_ms = 0, overhead_ms = 0;
  double sent_bytes = 0;
};
inline constexpr size_t kOneBitStageCount = enum_names(OneBitStage{}).size();

// The predicted step, per rank, in milliseconds. With 0/1 Adam, the mean over the run's
// steps (train.steps) as its schedule lays out their stages, each stage in STAGES.
struct Prediction {
  double compute_ms = 0;  // forward + backward of every micro-batch (recompute included)
  double forward_ms = 0, backward_ms = 0;
  double tensor_comm_ms = 0;  // tensor parallelism's collectives (on the critical path)
  double bubble_ms = 0;       // the pipeline's fill and drain
  int data_parallel = 1;      // replicas exchanging gradients
  double optimizer_ms = 0;     // the update (and 1-bit Adam's compression)
  double comm_ms = 0;          // the gradient exchange in flight
  double comm_exposed_ms = 0;  // the part backward does not hide
  double overhead_ms = 0;
  double step_ms = 0;
  double tokens_per_s = 0, mfu = 0;
  int buckets = 0;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring;  // the last (largest-first) bucket's
  double sent_bytes = 0;                                    // per rank per step
  double run_sent_bytes = 0;  // per rank over train.steps (1-bit Adam: its compressed steps')
  bool staged = false;        // 0/1 Adam: STAGES hold its run
  std::array<StagePrediction, kOneBitStageCount> stages{};
  // Memory per rank, bytes.
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  double memory_bytes() const {
    return params_bytes + grads_bytes + optimizer_bytes + activations_bytes;
  }
};

// InputError unless CLUSTER's model parallelism can lay out CFG: the ranks a multiple of
// tensor x pipeline, tensor ranks within a node, heads and layers divisible, and the
// interleaved schedule's micro-batches a multiple of the stages.
void check_parallel(const Config& cfg, const PlanCluster& cluster);

// The step of CFG (its model, batch, precision, recompute, comm and optimizer) on DEVICE and
// CLUSTER. With optimizer onebit_adam, the compressed stage's step; with zero_one_adam, the
// mean step of its run: warm-up steps exchange fp32 gradients as AdamW, compressed and sync
// steps 1-bit Adam's code of the whole buffer once backward has ended, local steps nothing
// (docs/plan.md, "0/1 Adam"). Under model parallelism,
// the last pipeline stage's step (the head makes it the slowest): its share of every op,
// tensor parallelism's collectives, the bubble (p - 1) / v of a micro-batch's forward and
// backward plus the point-to-point sends that fill and drain the pipeline, and the
// data-parallel exchange of its gradients with the same overlap as without.
Prediction predict(const Config& cfg, const PlanDevice& device, const PlanCluster& cluster);

class GptSpec;
struct GptOptions;
// Activation bytes at their peak on the rank that holds the most: the spec's for a B x T
// micro-batch, divided among MP's tensor ranks and scaled by the micro-batches a pipeline
// keeps in flight.
double activation_bytes(const GptSpec& spec, const GptOptions& opt, Device device, int B, int T,
                        const ModelParallel& mp);

// One knob turned: the --set that turns it and the step it predicts.
struct Knob {
  std::string what;
  std::vector<std::string> sets;
  Prediction prediction;
  bool fits = true;  // its memory fits the device's
};
// Micro-batch, accumulation, bucket size, recompute and 1-bit Adam, each turned once,
// ordered by how much they change the step (largest gain first).
std::vector<Knob> knobs(const Config& cfg, const PlanDevice& device, const PlanCluster& cluster);

// The efficiencies and per-step overhead that make the compute model reproduce a measured
// run: for each op class, the sum of the ops' bound times (at PEAK_GFLOPS and
// BANDWIDTH_GBS) over their measured time, from OPS (a step's averaged ops); the overhead is
// STEP_MS less the ops and the exposed communication EXPOSED_MS.
PlanDevice calibrate(const OpProfile& ops, double peak_gflops, double bandwidth_gbs, double step_ms,
                     double exposed_ms, std::string source);

// The median of FITS (calibrate() of several runs of one shape, against one device): of
// each op class's efficiency and of the per-step overhead, each on its own; the first
// fit's name and yardsticks. FITS must not be empty.
PlanDevice median_fit(const std::vector<PlanDevice>& fits);

// The table of devices (docs/plan.md names each figure's source): h100-sxm, h200-sxm
// (cpu comes from calibrate()). InputError naming the known ones for another NAME.
PlanDevice table_device(const std::string& name, DType dtype);
// Links: nvlink4 (about 370 GB/s busbw on 8 GPUs), nvlink4-h200 (475 GB/s, nccl-tests),
// ndr (InfiniBand NDR, about 48 GB/s per NIC), and shm (this host's MPI shared memory, fitted
// from `ringstep bench allreduce` here). InputError for another NAME.
LinkModel table_link(const std::string& name);
// A link emulated at GBPS gigabits per second with LATENCY_US (comm.link), over BASE.
LinkModel emulated_link(double gbps, double latency_us, const LinkModel& base);
// Alpha and busbw fitted by least squares to `bench allreduce --json` rows (JSON Lines) of
// ALGO: time = 2(p-1) alpha + S 2(p-1)/p / busbw. InputError for a file without such rows.
LinkModel fit_link(const std::string& bench_json_path, const std::string& algo);

// This CPU as calibrated: its cores' peak per product dtype and the node's memory bandwidth
// (measured once, at calibration, on an idle moment), and the efficiencies and per-step
// overhead fitted to one run. Fixed numbers, so that a prediction does not inherit the noise
// of a shared host's start-of-run peak.
struct CpuCalibration {
  double peak_gflops_per_core_fp32 = 0, peak_gflops_per_core_bf16 = 0;
  double node_bandwidth_gbs = 0;
  int cores = 1;
  std::array<double, kOpClassCount> efficiency{};
  double step_overhead_ms = 0;
  std::string source;
};
// The one calibrated here (docs/plan.md, "This CPU").
CpuCalibration default_cpu_calibration();
nlohmann::ordered_json to_json(const CpuCalibration& c);
// InputError naming WHERE for a field missing or out of range.
CpuCalibration cpu_calibration_from_json(const nlohmann::json& j, const std::string& where);
// The device one of LOCAL_RANKS ranks of THREADS threads each sees on this CPU: the cores'
// peak for DTYPE times the cores it gets (min(threads, cores / local_ranks)), and an equal
// share of the node's bandwidth.
PlanDevice cpu_device(const CpuCalibration& c, DType dtype, int threads, int local_ranks);
nlohmann::ordered_json to_json(const PlanDevice& d);

struct ReportData;
// The cluster a finished run R ran on, with the run's AllReduce algorithm: over its emulated
// link when it had one (comm.link); else, when its network facts (summary.json's
// `network`) give every rank an interface of known rate, one rank per host over the
// slowest of those links (namespace hosts, a cluster); else its world on one node over this
// host's shared memory (or BENCH_LINK when not null).
PlanCluster run_cluster(const ReportData& r, const LinkModel* bench_link);

// A finished run predicted from its config on this CPU (CPU, at the run's world and
// threads) and compared with what it measured: the p50 step (1-bit Adam: the
// compressed stage's; 0/1 Adam: each stage's p50 weighed by its steps) and its phases.
struct RunCheck {
  Prediction predicted;
  double measured_step_ms = 0, measured_compute_ms = 0, measured_optimizer_ms = 0,
         measured_comm_exposed_ms = 0, measured_tokens_per_s = 0, measured_mfu = 0;
  double error_pct(double predicted_v, double measured_v) const {
    return measured_v > 0 ? 100 * (predicted_v - measured_v) / measured_v : 0;
  }
};
// InputError when the run has no config.yaml.
RunCheck check_run(const ReportData& r, const CpuCalibration& cpu, const LinkModel* bench_link);

}  // namespace ringstep
