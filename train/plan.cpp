#include "train/plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/sign_allreduce.h"
#include "core/error.h"
#include "core/stats.h"
#include "models/gpt_spec.h"
#include "optim/zero_one_adam.h"
#include "train/grad_sync.h"
#include "train/step_record.h"

namespace ringstep {
namespace {

// Messages at or below this size take recursive doubling in ringstep's ring
// (RingOptions::small_bytes, comm/ring_allreduce.h).
constexpr double kRingSmallBytes = 16 << 10;

// The bookkeeping collectives of a step (GradSync: agree's gather, the loss scaler's
// any_rank, the loss mean): small, latency-bound.
constexpr int kBookkeepingCollectives = 3;

// This host's MPI over shared memory, 2 ranks (docs/plan.md: `bench allreduce`, 64 KiB to
// 4 MiB rows; larger buffers under load fell far below this).
constexpr double kShmAlphaUs = 2, kShmBusbwGbs = 8;

double log2_ranks(int p) { return std::ceil(std::log2(double(p))); }

// Bytes per element one rank moves through memory to compress and decompress 1-bit Adam's
// momentum (optim/onebit_adam.h, comm/sign_allreduce.h): the worker reads the momentum and
// its error and writes the error back and the signs; the server does the same on its chunk;
// every rank writes the decoded result.
constexpr double kOneBitCodecBytesPerElem = 4 * (3 + 3 + 1);

double bound_ms(const OpStat& s, double peak_gflops, double bandwidth_gbs) {
  const double compute = peak_gflops > 0 ? s.flops / (peak_gflops * 1e6) : 0;
  const double memory = bandwidth_gbs > 0 ? s.bytes / (bandwidth_gbs * 1e6) : 0;
  return std::max(compute, memory);
}

// The link a flat algorithm over the whole cluster is limited by.
const LinkModel& flat_link(const PlanCluster& c) {
  return c.ranks > c.per_node && c.per_node >= 1 ? c.inter : c.intra;
}

struct Exchange {
  double ms = 0;
  AllreduceAlgorithm algo = AllreduceAlgorithm::ring;
};

// One bucket's AllReduce: the run's algorithm, or the fastest the model knows.
Exchange bucket_allreduce(double bytes, const PlanCluster& c) {
  const LinkModel& link = flat_link(c);
  if (c.fixed_algorithm) {
    // ringstep's ring sends small messages by recursive doubling.
    const AllreduceAlgorithm a = c.algorithm == AllreduceAlgorithm::ring && bytes <= kRingSmallBytes
                                     ? AllreduceAlgorithm::recursive_doubling
                                     : c.algorithm;
    if (a == AllreduceAlgorithm::hierarchical)
      return {hierarchical_allreduce_ms(bytes, c.ranks, c.per_node, c.intra, c.inter), a};
    return {allreduce_ms(a, bytes, c.ranks, link), a};
  }
  Exchange best{allreduce_ms(AllreduceAlgorithm::ring, bytes, c.ranks, link),
                AllreduceAlgorithm::ring};
  for (AllreduceAlgorithm a :
       {AllreduceAlgorithm::recursive_doubling, AllreduceAlgorithm::rabenseifner}) {
    const double ms = allreduce_ms(a, bytes, c.ranks, link);
    if (ms < best.ms) best = {ms, a};
  }
  if (c.ranks > c.per_node && c.per_node > 1) {
    const double ms = hierarchical_allreduce_ms(bytes, c.ranks, c.per_node, c.intra, c.inter);
    if (ms < best.ms) best = {ms, AllreduceAlgorithm::hierarchical};
  }
  return best;
}

// Bytes one rank sends for an AllReduce of BYTES: 2(p-1)/p of it for the ring and
// Rabenseifner, log2(p) times it for recursive doubling, the intra-node halves plus the
// inter-node ring of 1/G for the hierarchical one.
double allreduce_sent_bytes(AllreduceAlgorithm algo, double bytes, const PlanCluster& c) {
  const double p = c.ranks;
  switch (algo) {
    case AllreduceAlgorithm::recursive_doubling:
      return log2_ranks(c.ranks) * bytes;
    case AllreduceAlgorithm::hierarchical: {
      const double g = std::max(1, std::min(c.per_node, c.ranks)), m = std::ceil(p / g);
      return 2 * (g - 1) / g * bytes + 2 * (m - 1) / m * bytes / g;
    }
    case AllreduceAlgorithm::ring:
    case AllreduceAlgorithm::rabenseifner:
      break;
  }
  return 2 * (p - 1) / p * bytes;
}

// The engine runs the buckets in order, each once it is ready (backward has finished its
// units) and the previous one is done; returns when the last ends.
double fifo_end(const std::vector<double>& ready, const std::vector<double>& ms) {
  double t = 0;
  for (size_t b = 0; b < ms.size(); ++b) t = std::max(t, ready[b]) + ms[b];
  return t;
}

// A step's data-parallel exchange: in flight, exposed after backward, sent per rank.
struct DpExchange {
  double comm_ms = 0, exposed_ms = 0, sent_bytes = 0;
  AllreduceAlgorithm algo = AllreduceAlgorithm::ring;  // the last bucket's
};

// The buckets' fp32 AllReduces, each from READY, with the engine's FIFO overlap against a
// backward that ends at END; SHARDED: the reduce-scatter half of each.
DpExchange fp32_exchange(const std::vector<Bucket>& buckets, const std::vector<double>& ready,
                         double end, const PlanCluster& c, bool sharded) {
  DpExchange x;
  std::vector<double> ms;
  const double share = sharded ? 0.5 : 1;
  for (const Bucket& k : buckets) {
    const double bytes = 4.0 * double(k.end - k.begin);
    const Exchange e = bucket_allreduce(bytes, c);
    ms.push_back(share * e.ms);
    x.algo = e.algo;
    x.sent_bytes += share * allreduce_sent_bytes(e.algo, bytes, c);
  }
  for (double m : ms) x.comm_ms += m;
  x.exposed_ms = std::max(0.0, fifo_end(ready, ms) - end);
  return x;
}

// 1-bit Adam's exchange of each bucket (comm/sign_allreduce.h): an all-to-all of each
// rank's signs, then an allgather of the server's, p - 1 messages each, of the bytes
// sign_allreduce_bytes counts (1 bit per element, padded, and an fp32 scale per segment of
// the sign code's BLOCK), with the same FIFO overlap.
DpExchange sign_exchange(const std::vector<Bucket>& buckets, const std::vector<double>& ready,
                         double end, size_t block, const PlanCluster& c) {
  DpExchange x;
  std::vector<double> ms;
  const LinkModel& link = flat_link(c);
  for (const Bucket& k : buckets) {
    const size_t len = k.end - k.begin;
    const double sent =
        double(sign_allreduce_bytes(len, split_segments(k.tensor_ends, len, block), c.ranks));
    ms.push_back(2.0 * (c.ranks - 1) * link.alpha_us / 1e3 + sent / (link.busbw_gbs * 1e6));
    x.sent_bytes += sent;
  }
  for (double m : ms) x.comm_ms += m;
  x.exposed_ms = std::max(0.0, fifo_end(ready, ms) - end);
  return x;
}

// The mean step of a run whose STAGES hold their steps.
StagePrediction mean_step(const std::array<StagePrediction, kOneBitStageCount>& stages) {
  StagePrediction m;
  for (const StagePrediction& s : stages) {
    m.steps += s.steps;
    m.step_ms += s.steps * s.step_ms;
    m.optimizer_ms += s.steps * s.optimizer_ms;
    m.comm_ms += s.steps * s.comm_ms;
    m.comm_exposed_ms += s.steps * s.comm_exposed_ms;
    m.overhead_ms += s.steps * s.overhead_ms;
    m.sent_bytes += s.steps * s.sent_bytes;
  }
  const double k = m.steps > 0 ? 1.0 / m.steps : 0;
  for (double* f :
       {&m.step_ms, &m.optimizer_ms, &m.comm_ms, &m.comm_exposed_ms, &m.overhead_ms, &m.sent_bytes})
    *f *= k;
  return m;
}

}  // namespace

OpClass op_class(Op op) {
  switch (op) {
    case Op::qkv:
    case Op::attn_proj:
    case Op::mlp_fc:
    case Op::mlp_proj:
    case Op::lm_head:
      return OpClass::matmul;
    case Op::attention:
      return OpClass::attention;
    case Op::optimizer:
      return OpClass::optimizer;
    default:
      return OpClass::elementwise;
  }
}

double allreduce_ms(AllreduceAlgorithm algo, double bytes, int ranks, const LinkModel& link) {
  if (ranks <= 1) return 0;
  const double p = ranks, a = link.alpha_us / 1e3, b = 1 / (link.busbw_gbs * 1e6);  // ms, ms/B
  switch (algo) {
    case AllreduceAlgorithm::recursive_doubling:
      return log2_ranks(ranks) * (a + bytes * b);
    case AllreduceAlgorithm::rabenseifner:
      return 2 * log2_ranks(ranks) * a + 2 * (p - 1) / p * bytes * b;
    case AllreduceAlgorithm::ring:
    case AllreduceAlgorithm::hierarchical:
      break;
  }
  return 2 * (p - 1) * a + 2 * (p - 1) / p * bytes * b;
}

double allgather_exposed_ms(double allgather_ms, double forward_ms, int pp, int vp) {
  if (pp <= 1) return std::max(0.0, allgather_ms - forward_ms);
  const double chunk_ms = forward_ms / vp, part = allgather_ms / vp;
  double late = 0;
  for (int j = 0; j < vp; ++j)
    late = std::max(late, (j + 1) * part - (pp - 1) * chunk_ms - double(j) * pp * chunk_ms);
  return late;
}

double hierarchical_allreduce_ms(double bytes, int ranks, int per_node, const LinkModel& intra,
                                 const LinkModel& inter) {
  const int g = std::max(1, std::min(per_node, ranks)), nodes = (ranks + g - 1) / g;
  // A reduce-scatter or an allgather is half a ring AllReduce.
  const double intra_half = allreduce_ms(AllreduceAlgorithm::ring, bytes, g, intra) / 2;
  return 2 * intra_half + allreduce_ms(AllreduceAlgorithm::ring, bytes / g, nodes, inter);
}

void check_parallel(const Config& cfg, const PlanCluster& c) {
  const ModelParallel& mp = c.parallel;
  const ModelConfig& m = cfg.model;
  auto fail = [](const std::string& why) { throw InputError("model parallelism: " + why); };
  if (mp.tensor < 1 || mp.pipeline < 1 || mp.virtual_stages < 1)
    fail("--tensor-parallel, --pipeline-parallel and --virtual-stages must be >= 1");
  if (c.ranks % mp.model_ranks() != 0)
    fail("--ranks " + std::to_string(c.ranks) + " is not a multiple of tensor x pipeline = " +
         std::to_string(mp.model_ranks()));
  if (mp.tensor > c.per_node || c.per_node % mp.tensor != 0)
    fail("--tensor-parallel " + std::to_string(mp.tensor) +
         " must divide the ranks per node (" + std::to_string(c.per_node) +
         "): tensor parallelism stays inside a node");
  if (m.n_heads % mp.tensor != 0)
    fail("model.n_heads " + std::to_string(m.n_heads) + " is not a multiple of --tensor-parallel " +
         std::to_string(mp.tensor));
  if (m.n_layers % (mp.pipeline * mp.virtual_stages) != 0)
    fail("model.n_layers " + std::to_string(m.n_layers) +
         " is not a multiple of pipeline x virtual stages = " +
         std::to_string(mp.pipeline * mp.virtual_stages));
  if (mp.tensor_comm_overlap && mp.tensor < 2)
    fail("--tp-comm-overlap needs --tensor-parallel >= 2: there is no tensor-parallel "
         "communication to overlap");
  if (mp.distributed_optimizer && cfg.optimizer.name != OptimizerKind::adamw)
    fail("--distributed-optimizer models AdamW only (1-bit Adam keeps whole error buffers)");
  if (mp.virtual_stages > 1 && (mp.pipeline < 2 || cfg.train.grad_accum_steps % mp.pipeline != 0))
    fail("--virtual-stages > 1 needs --pipeline-parallel >= 2 and train.grad_accum_steps (the "
         "micro-batches) a multiple of it, as Megatron's interleaved schedule does");
}

namespace {

// Tensor parallelism's collectives of one block and micro-batch that stay on the critical
// path: each AllReduce of the activations is a reduce-scatter and an allgather (sequence
// parallelism), half its time each.
struct TensorComm {
  double forward_ms = 0, backward_ms = 0, recompute_ms = 0;
};
// Halves of ONE, one beside each of GEMMS (ms); with HIDE (Transformer Engine's
// tp-comm-overlap; Wang et al. 2023, "Overlap Communication with Dependent Computation via
// Decomposition in Large Deep Learning Models": the collective cut into chunks, each sent while the
// product computes another), each shows only where it outlasts its product.
template <size_t N>
double exposed_halves(double one, const std::array<double, N>& gemms, bool hide) {
  double ms = 0;
  for (double g : gemms) ms += hide ? std::max(0.0, one / 2 - g) : one / 2;
  return ms;
}

// The gradient units one rank of the last pipeline stage holds, in backward order, each
// divided among the tensor ranks: its blocks' halves (units 0 .. 2 L/p - 1) and, with one
// stage, the embeddings; with several, the last stage's copy of the tied token embedding.
// Without model parallelism, the spec's units as they are.
std::vector<std::pair<size_t, size_t>> stage_units(const GptSpec& spec, const ModelParallel& mp) {
  const auto units = spec.bucket_units();
  if (mp.model_ranks() == 1) return units;
  const int L = spec.config().n_layers, stage_layers = L / mp.pipeline;
  const int stage_units = spec.attention_unit(L - stage_layers) + 1;  // down to its lowest block
  std::vector<size_t> sizes;
  for (int u = 0; u < stage_units; ++u)
    sizes.push_back(units[size_t(u)].second - units[size_t(u)].first);
  const Registry& reg = spec.registry();
  sizes.push_back(mp.pipeline == 1 ? units.back().second - units.back().first
                                   : reg.tensors()[spec.wte()].numel);
  // Contiguous ranges, each just below the previous one, as the spec's are.
  size_t top = 0;
  for (size_t& n : sizes) top += n = (n + mp.tensor - 1) / mp.tensor;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t n : sizes) out.push_back({top - n, top}), top -= n;
  return out;
}

}  // namespace

Prediction predict(const Config& cfg, const PlanDevice& dev, const PlanCluster& cluster) {
  const GptSpec spec(cfg.model);
  const GptOptions opt = gpt_options(cfg);
  const int B = cfg.train.micro_batch, T = cfg.model.seq_len, A = cfg.train.grad_accum_steps;
  const int p = std::max(1, cluster.ranks);
  const ModelParallel& mp = cluster.parallel;
  const int tp = mp.tensor, pp = mp.pipeline, vp = mp.virtual_stages;
  const int dp = std::max(1, p / mp.model_ranks());
  const bool sharded = mp.distributed_optimizer && dp > 1;
  const OpProfile ops = spec.step_ops(opt, dev.kind, B, T, A);
  Prediction r;
  r.data_parallel = dp;
  // The last stage's share of an op: its blocks' part of a block op, the whole head, the
  // embedding only with one stage; each divided among the tensor ranks.
  auto op_ms = [&](OpPhase phase, Op op) {
    const OpStat& s = ops.at(phase, op);
    if (s.calls == 0) return 0.0;
    const double ms = bound_ms(s, dev.peak_gflops, dev.mem_bandwidth_gbs) /
                      std::max(1e-6, dev.efficiency[size_t(op_class(op))]);
    if (phase == OpPhase::optimizer && sharded) return ms / (tp * pp * dp);
    if (op == Op::lm_head || op == Op::softmax_xent) return ms / tp;
    if (op == Op::embedding && phase != OpPhase::optimizer) return pp == 1 ? ms / tp : 0;
    return ms / (tp * pp);
  };
  for (const auto& [op, op_name] : enum_names(Op{})) {
    r.forward_ms += op_ms(OpPhase::forward, op);
    r.backward_ms += op_ms(OpPhase::backward, op);
    r.optimizer_ms += op_ms(OpPhase::optimizer, op);
  }
  r.compute_ms = r.forward_ms + r.backward_ms;

  const int L = cfg.model.n_layers, stage_layers = L / pp;
  // Tensor parallelism: per block and micro-batch two collectives of the B x T x C activations
  // forward, two backward, and one more for a block that backward recomputes from its input
  // (it stops before the MLP's output projection). On the critical path.
  double tensor_bwd_ms = 0;
  const double act_bytes = double(B) * T * cfg.model.d_model * dtype_size(cfg.precision.dtype);
  if (tp > 1) {
    const double one = allreduce_ms(AllreduceAlgorithm::ring, act_bytes, tp, cluster.intra);
    double recomputed = 0;
    for (int l = L - stage_layers; l < L; ++l)
      recomputed += block_keep(opt, l) == BlockKeep::input ? 1 : 0;
    // A block's products, per micro-batch, in sequence parallelism's order: the allgather
    // before qkv, the reduce-scatter after attn_proj, the allgather before mlp_fc, the
    // reduce-scatter after mlp_proj (backward: the same four, each beside its product's
    // backward).
    auto gemms = [&](OpPhase phase) {
      std::array<double, 4> ms{};
      const Op ops4[] = {Op::qkv, Op::attn_proj, Op::mlp_fc, Op::mlp_proj};
      for (size_t i = 0; i < 4; ++i) ms[i] = op_ms(phase, ops4[i]) / (A * stage_layers);
      return ms;
    };
    const std::array<double, 4> fwd = gemms(OpPhase::forward), bwd = gemms(OpPhase::backward);
    const bool hide = mp.tensor_comm_overlap;
    const TensorComm block{exposed_halves(one, fwd, hide), exposed_halves(one, bwd, hide),
                           exposed_halves(one, std::array<double, 2>{fwd[0], fwd[2]}, hide)};
    tensor_bwd_ms = A * (stage_layers * block.backward_ms + recomputed * block.recompute_ms);
    r.tensor_comm_ms = A * stage_layers * block.forward_ms + tensor_bwd_ms;
  }
  // The pipeline: (p - 1) / v micro-batches' forward and backward of idle time on each stage,
  // and the first forward and last backward crossing every chunk boundary; the sends of the
  // steady state hide under compute. A send carries a tensor rank's 1/t of the activations.
  if (pp > 1) {
    const bool across_nodes = tp * dp >= cluster.per_node;
    const LinkModel& link = across_nodes ? cluster.inter : cluster.intra;
    const double send_ms = link.alpha_us / 1e3 + act_bytes / tp / (link.busbw_gbs * 1e6);
    const double micro_ms = (r.compute_ms + r.tensor_comm_ms) / A;
    r.bubble_ms = double(pp - 1) / vp * micro_ms + 2.0 * (pp * vp - 1) * send_ms;
  }

  // The last micro-batch's backward: the head, then this stage's blocks from the top, then
  // (one stage) the embeddings. Units 2k and 2k + 1 are the MLP and attention halves of the
  // k-th block from the top: done after the head, k blocks and the MLP's share of a block
  // (its products and GELU against the block's ops), and after k + 1 blocks.
  const double bwd = (r.backward_ms + tensor_bwd_ms) / A;
  const double head =
      (op_ms(OpPhase::backward, Op::lm_head) + op_ms(OpPhase::backward, Op::softmax_xent)) / A;
  const double emb = op_ms(OpPhase::backward, Op::embedding) / A;
  const double block = stage_layers > 0 ? std::max(0.0, bwd - head - emb) / stage_layers : 0;
  double mlp_ms = 0, block_ms = 0;
  for (Op op : {Op::layernorm, Op::qkv, Op::attention, Op::attn_proj, Op::mlp_fc, Op::gelu,
                Op::mlp_proj}) {
    const double ms = op_ms(OpPhase::backward, op);
    block_ms += ms;
    if (op == Op::mlp_fc || op == Op::gelu || op == Op::mlp_proj) mlp_ms += ms;
  }
  const double mlp_share = block_ms > 0 ? mlp_ms / block_ms : 0.5;
  auto unit_done = [&](int u) {
    const int k = u / GptSpec::kUnitsPerBlock;
    if (k >= stage_layers) return bwd;
    return head + (k + (u % GptSpec::kUnitsPerBlock == 0 ? mlp_share : 1.0)) * block;
  };

  const std::vector<std::pair<size_t, size_t>> units = stage_units(spec, mp);
  double n = 0;  // the elements of this rank's parameters (and gradients)
  for (const auto& [begin, end] : units) n += double(end - begin);
  std::vector<Bucket> buckets = make_buckets(units, size_t(cfg.comm.bucket_mb * 1048576.0));
  std::vector<size_t> starts;  // 1-bit Adam's scales are per tensor in each bucket
  if (mp.model_ranks() == 1)
    for (const TensorInfo& t : spec.registry().tensors()) starts.push_back(t.offset);
  else
    for (const Bucket& k : buckets) starts.push_back(k.begin);  // one per bucket (approximate)
  cut_at_tensors(buckets, starts);
  r.buckets = int(buckets.size());
  PlanCluster replicas = cluster;  // the data-parallel group: one rank in t is a neighbour
  replicas.ranks = dp;
  replicas.per_node = std::max(1, cluster.per_node / tp);

  // The exchanges a step may make, each from when its buckets may start: as backward
  // finishes their units, or all once it has ended. Interleaved, the rank's v chunks run
  // their last micro-batch's backward one after another in the drain, p micro-batches of a
  // chunk apart (Narayanan et al. 2021, fig. 4): chunk j (in backward order) ends
  // (v - 1 - j)(p - 1) chunk backwards of bwd / v sooner than in one sequence, and its
  // buckets start then (Megatron's --overlap-grad-reduce), under the drain. Times count
  // from LEAD before the last micro-batch's backward, when the first chunk's buckets may
  // start at the earliest.
  const size_t block_units = std::max<size_t>(1, units.size() - 1);  // the last: embeddings
  auto drain_ms = [&](int u) {
    const int j = int(std::min<size_t>(size_t(vp - 1), size_t(u) * size_t(vp) / block_units));
    return double(vp - 1 - j) * (pp - 1) * bwd / vp;
  };
  const double lead = drain_ms(0), end = lead + bwd;
  std::vector<double> done, after(buckets.size(), end);
  for (const Bucket& k : buckets)
    done.push_back(lead + unit_done(k.last_unit) - drain_ms(k.last_unit));
  const OptimizerKind kind = cfg.optimizer.name;
  const size_t scale_block = size_t(cfg.optimizer.onebit.scale_block);
  DpExchange fp32, sign;
  if (dp > 1 && kind != OptimizerKind::onebit_adam) {
    fp32 = fp32_exchange(buckets, cfg.comm.overlap ? done : after, end, replicas, sharded);
    if (sharded) {  // the parameters' allgather, under the next step's first forwards
      const double bytes = n * dtype_size(cfg.precision.dtype);
      const Exchange e = bucket_allreduce(bytes, replicas);
      fp32.comm_ms += e.ms / 2;
      fp32.sent_bytes += allreduce_sent_bytes(e.algo, bytes, replicas) / 2;
      fp32.exposed_ms += allgather_exposed_ms(e.ms / 2, r.forward_ms / A, pp, vp);
    }
  }
  if (dp > 1 && kind == OptimizerKind::onebit_adam) {
    const bool under_backward = cfg.optimizer.onebit.overlap && cfg.comm.overlap;
    sign = sign_exchange(buckets, under_backward ? done : after, end, scale_block, replicas);
  }
  if (dp > 1 && kind == OptimizerKind::zero_one_adam)  // begun once the clip norm is known
    sign = sign_exchange(buckets, after, end, scale_block, replicas);
  r.algorithm = fp32.algo;

  // One step of each kind: the update, with 1-bit Adam's compression and decompression
  // when it codes (on the training thread), and the exchange.
  const double bookkeeping_ms =
      p > 1 ? allreduce_ms(AllreduceAlgorithm::recursive_doubling, 64, p, flat_link(cluster)) : 0;
  r.overhead_ms = dev.step_overhead_ms + kBookkeepingCollectives * bookkeeping_ms;
  const double codec_ms = n * kOneBitCodecBytesPerElem / (dev.mem_bandwidth_gbs * 1e6) /
                          std::max(1e-6, dev.efficiency[size_t(OpClass::elementwise)]);
  // OWN_NORM: the gradients are not averaged, so the ranks agree on the clip norm with one
  // more small collective.
  auto step_of = [&](const DpExchange& x, bool coded, bool own_norm) {
    StagePrediction s;
    s.optimizer_ms = r.optimizer_ms + (coded ? codec_ms : 0);
    s.comm_ms = x.comm_ms;
    s.comm_exposed_ms = x.exposed_ms;
    s.sent_bytes = x.sent_bytes;
    s.overhead_ms = r.overhead_ms + (own_norm ? bookkeeping_ms : 0);
    s.step_ms = r.compute_ms + r.tensor_comm_ms + r.bubble_ms + s.optimizer_ms + s.comm_exposed_ms +
                s.overhead_ms;
    return s;
  };
  StagePrediction mean;
  if (kind == OptimizerKind::adamw) mean = step_of(fp32, false, false);
  if (kind == OptimizerKind::onebit_adam) mean = step_of(sign, true, dp > 1);
  if (kind == OptimizerKind::zero_one_adam) {
    r.staged = true;
    r.stages[size_t(OneBitStage::warmup)] = step_of(fp32, false, false);
    r.stages[size_t(OneBitStage::compressed)] = r.stages[size_t(OneBitStage::sync)] =
        step_of(sign, true, true);
    r.stages[size_t(OneBitStage::local)] = step_of({}, false, true);
    const ZeroOneSchedule sched{zero_one_params(cfg)};
    for (int s = 1; s <= cfg.train.steps; ++s) ++r.stages[size_t(sched.stage(s, dp))].steps;
    mean = mean_step(r.stages);
  }
  r.optimizer_ms = mean.optimizer_ms;
  r.comm_ms = mean.comm_ms;
  r.comm_exposed_ms = mean.comm_exposed_ms;
  r.overhead_ms = mean.overhead_ms;
  r.sent_bytes = mean.sent_bytes;
  r.run_sent_bytes = mean.sent_bytes * cfg.train.steps;
  r.step_ms = mean.step_ms;
  const double tokens = double(B) * A * dp * T;
  const Throughput t =
      throughput(tokens, r.step_ms, spec.model_flops_per_token(), p, dev.peak_gflops);
  r.tokens_per_s = t.tokens_per_s;
  r.mfu = t.mfu;

  r.params_bytes = 4 * n;
  r.grads_bytes = 4 * n;
  // AdamW's two moments; 1-bit Adam's two error buffers; 0/1 Adam's m, v, u, the anchor and
  // the two error buffers.
  const double state_buffers = kind == OptimizerKind::zero_one_adam ? 6
                               : kind == OptimizerKind::onebit_adam ? 4
                                                                    : 2;
  r.optimizer_bytes = 4 * n * (state_buffers - 2) + 8 * n / (sharded ? dp : 1);
  r.activations_bytes = activation_bytes(spec, opt, dev.kind, B, T, mp);
  return r;
}

double activation_bytes(const GptSpec& spec, const GptOptions& opt, Device device, int B, int T,
                        const ModelParallel& mp) {
  // A pipeline's first stage holds p micro-batches of its L/p blocks in flight: one
  // micro-batch of every block, (1 + (p-1)/(p v)) of it interleaved (Korthikanti et al.
  // 2022); tensor ranks each hold 1/t with sequence parallelism.
  const int pp = mp.pipeline, vp = mp.virtual_stages;
  const double in_flight = pp > 1 ? 1 + double(pp - 1) / (pp * vp) : 1;
  return spec.activations(opt, device, B, T).peak * in_flight / mp.tensor;
}

std::vector<Knob> knobs(const Config& cfg, const PlanDevice& device, const PlanCluster& cluster) {
  std::vector<std::pair<std::string, std::vector<std::string>>> turns;
  const int mb = cfg.train.micro_batch, acc = cfg.train.grad_accum_steps;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (acc % 2 == 0)
    turns.push_back(
        {"micro-batch x2, accumulation /2",
         {"train.micro_batch=" + num(2 * mb), "train.grad_accum_steps=" + num(acc / 2)}});
  if (mb % 2 == 0)
    turns.push_back(
        {"micro-batch /2, accumulation x2",
         {"train.micro_batch=" + num(mb / 2), "train.grad_accum_steps=" + num(2 * acc)}});
  if (cluster.ranks / cluster.parallel.model_ranks() > 1) {  // data-parallel replicas
    turns.push_back({"buckets /4", {"comm.bucket_mb=" + num(cfg.comm.bucket_mb / 4)}});
    turns.push_back({"buckets x4", {"comm.bucket_mb=" + num(cfg.comm.bucket_mb * 4)}});
    if (!cfg.comm.overlap) turns.push_back({"overlap on", {"comm.overlap=true"}});
    if (cfg.optimizer.name == OptimizerKind::adamw) {
      turns.push_back({"1-bit Adam (compressed stage)", {"optimizer.name=onebit_adam"}});
      turns.push_back({"0/1 Adam (mean over the run)", {"optimizer.name=zero_one_adam"}});
    } else {
      turns.push_back({"AdamW", {"optimizer.name=adamw"}});
    }
  }
  for (const auto& [policy, policy_name] : enum_names(RecomputePolicy{}))
    if (policy != cfg.recompute.policy && policy != RecomputePolicy::every_k)
      turns.push_back({std::string("recompute ") + policy_name,
                       {std::string("recompute.policy=") + policy_name}});

  std::vector<Knob> out;
  const std::string yaml = config_to_yaml(cfg);
  for (const auto& [what, sets] : turns) {
    Config c;
    try {  // the sets as `--set` applies them; a knob the config's rules refuse is left out
      c = parse_config(yaml, "knob", sets);
      check_parallel(c, cluster);
    } catch (const InputError&) {
      continue;
    }
    Knob k{what, sets, predict(c, device, cluster), true};
    k.fits = device.memory_bytes <= 0 || k.prediction.memory_bytes() <= device.memory_bytes;
    out.push_back(std::move(k));
  }
  std::stable_sort(out.begin(), out.end(), [](const Knob& a, const Knob& b) {
    return a.prediction.step_ms < b.prediction.step_ms;
  });
  return out;
}

PlanDevice calibrate(const OpProfile& ops, double peak_gflops, double bandwidth_gbs, double step_ms,
                     double exposed_ms, std::string source) {
  std::array<double, kOpClassCount> bound{}, measured{};
  double ops_ms = 0;
  for (const auto& [phase, phase_name] : enum_names(OpPhase{}))
    for (const auto& [op, op_name] : enum_names(Op{})) {
      const OpStat& s = ops.at(phase, op);
      if (s.calls == 0) continue;
      bound[size_t(op_class(op))] += bound_ms(s, peak_gflops, bandwidth_gbs);
      measured[size_t(op_class(op))] += s.ms;
      ops_ms += s.ms;
    }
  PlanDevice d;
  d.name = "cpu";
  d.peak_gflops = peak_gflops;
  d.mem_bandwidth_gbs = bandwidth_gbs;
  for (size_t c = 0; c < kOpClassCount; ++c)
    d.efficiency[c] = measured[c] > 0 ? bound[c] / measured[c] : 1;
  d.step_overhead_ms = std::max(0.0, step_ms - ops_ms - exposed_ms);
  d.source = std::move(source);
  return d;
}

PlanDevice median_fit(const std::vector<PlanDevice>& fits) {
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const PlanDevice& f : fits) v.push_back(field(f));
    return percentile(std::move(v), 0.5);
  };
  PlanDevice d = fits.at(0);
  for (size_t c = 0; c < kOpClassCount; ++c)
    d.efficiency[c] = median([c](const PlanDevice& f) { return f.efficiency[c]; });
  d.step_overhead_ms = median([](const PlanDevice& f) { return f.step_overhead_ms; });
  return d;
}

PlanDevice table_device(const std::string& name, DType dtype) {
  // Dense datasheet peaks (NVIDIA H100 and H200 datasheets): bf16/fp16 989 TFLOP/s, fp32
  // 67 TFLOP/s on the CUDA cores; HBM3 3.35 TB/s (H100 SXM, 80 GB) and HBM3e 4.8 TB/s (H200
  // SXM, 141 GB). Efficiencies: docs/plan.md, "Assumptions".
  const double peak = dtype == DType::f32 ? 67e3 : 989e3;
  const std::array<double, kOpClassCount> eff = {0.60, 0.35, 0.70, 0.70};
  if (name == "h100-sxm")
    return {name, Device::cuda, peak, 3350,
            80e9, eff,          0,    "NVIDIA H100 SXM datasheet; efficiencies assumed"};
  if (name == "h200-sxm")
    return {name,  Device::cuda, peak, 4800,
            141e9, eff,          0,    "NVIDIA H200 SXM datasheet; efficiencies assumed"};
  throw InputError("--device '" + name + "': expected cpu, h100-sxm or h200-sxm");
}

LinkModel table_link(const std::string& name) {
  if (name == "nvlink4") return {2, 370, "NVLink 4, ring busbw on 8 H100 (about 370 GB/s)"};
  if (name == "nvlink4-h200") return {2, 475, "NVLink 4, nccl-tests busbw on 8 H200 (475 GB/s)"};
  if (name == "ndr") return {5, 48, "InfiniBand NDR 400 Gb/s, about 48 GB/s per NIC"};
  if (name == "shm")
    return {kShmAlphaUs, kShmBusbwGbs, "MPI shared memory on this host (bench allreduce fit)"};
  throw InputError("link '" + name + "': expected nvlink4, nvlink4-h200, ndr or shm");
}

LinkModel emulated_link(double gbps, double latency_us, const LinkModel& base) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "emulated link %g Gb/s, %g us (comm.link)", gbps, latency_us);
  return {base.alpha_us + latency_us, gbps / 8, buf};
}

LinkModel fit_link(const std::string& path, const std::string& algo) {
  std::ifstream in(path);
  if (!in) throw InputError("bench file '" + path + "' cannot be read");
  // time_us = m alpha + x / busbw, x = S 2(p-1)/p, m = 2(p-1): least squares on (x, time).
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0, messages = 0;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("algo") || !j.contains("bytes") ||
        !j.contains("ranks") || !j.contains("time_us"))
      throw InputError(path + ":" + std::to_string(lineno) +
                       ": not a `bench allreduce --json` row (algo, ranks, bytes, time_us)");
    if (j["algo"] != algo || double(j["bytes"]) <= kRingSmallBytes) continue;
    const double p = j["ranks"], x = double(j["bytes"]) * 2 * (p - 1) / p, y = j["time_us"];
    messages = 2 * (p - 1);
    sx += x, sy += y, sxx += x * x, sxy += x * y, n += 1;
  }
  const double det = n * sxx - sx * sx;
  if (n < 2 || det <= 0 || messages <= 0)
    throw InputError("bench file '" + path + "': fewer than 2 rows of algo " + algo +
                     " above 16 KiB on more than one rank");
  const double slope = (n * sxy - sx * sy) / det, icept = (sy - slope * sx) / n;
  if (slope <= 0) throw InputError("bench file '" + path + "': time does not grow with size");
  return {std::max(0.0, icept / messages), 1e-3 / slope, "fitted to " + path};
}

}  // namespace ringstep
