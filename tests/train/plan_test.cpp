// The plan's models against their formulas, computed here independently: Thakur et al.'s
// AllReduce costs, the step as the sum of its parts, a calibration that reproduces the
// profile it was fitted to, the FIFO overlap with backward, 1-bit Adam's volume, the link
// fit; and `ringstep plan`'s bad inputs (exit 2) and JSON.
#include "train/plan.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "comm/sign_allreduce.h"
#include "core/error.h"
#include "models/gpt_spec.h"
#include "train/grad_sync.h"
#include "train/report.h"
#include "train/step_record.h"
#include "train/temp_dir_test.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

const LinkModel kLink{1, 1, "test"};  // 1 us per message, 1 GB/s = 1e6 bytes per ms

TEST(Plan, AllreduceCostsAreThakursFormulas) {
  const double n = 8e6;  // bytes: 8 ms on the link
  EXPECT_DOUBLE_EQ(allreduce_ms(AllreduceAlgorithm::ring, n, 8, kLink), 14e-3 + 14);
  EXPECT_DOUBLE_EQ(allreduce_ms(AllreduceAlgorithm::recursive_doubling, n, 8, kLink),
                   3 * (1e-3 + 8));
  EXPECT_DOUBLE_EQ(allreduce_ms(AllreduceAlgorithm::rabenseifner, n, 8, kLink), 6e-3 + 14);
  EXPECT_EQ(allreduce_ms(AllreduceAlgorithm::ring, n, 1, kLink), 0);
  // 8 ranks, 4 per node: reduce-scatter and allgather of 4 on the intra link (3 messages and
  // 3/4 n each), a 2-node ring of n/4 on the inter link.
  const LinkModel fast{1, 10, "intra"};
  EXPECT_DOUBLE_EQ(hierarchical_allreduce_ms(n, 8, 4, fast, kLink),
                   2 * (3e-3 + 0.75 * n / 1e7) + (2e-3 + n / 4 / 1e6));
}

Config Tiny() {
  Config c;
  c.model = {256, 128, 128, 4, 4};
  c.train.micro_batch = 8;
  c.train.grad_accum_steps = 2;
  return c;
}

PlanDevice Device1() {
  PlanDevice d;
  d.name = "cpu";
  d.peak_gflops = 100;
  d.mem_bandwidth_gbs = 20;
  d.efficiency = {0.5, 0.25, 0.8, 1.0};
  d.step_overhead_ms = 3;
  return d;
}

// One rank: the step is the ops at their bound over their class's efficiency, plus the
// overhead; tokens/s and MFU are throughput()'s.
TEST(Plan, OneRankStepIsTheOpsAtTheirBoundsPlusOverhead) {
  const Config cfg = Tiny();
  const PlanDevice dev = Device1();
  const Prediction p = predict(cfg, dev, PlanCluster{});
  const OpProfile ops = GptSpec(cfg.model).step_ops(gpt_options(cfg), Device::cpu, 8, 128, 2);
  double want = dev.step_overhead_ms;
  for (const auto& phase : ops.stat)
    for (size_t o = 0; o < kOpCount; ++o) {
      const OpStat& s = phase[o];
      if (s.calls == 0) continue;
      want += std::max(s.flops / 1e8, s.bytes / 2e7) / dev.efficiency[size_t(op_class(Op(o)))];
    }
  EXPECT_NEAR(p.step_ms, want, 1e-9 * want);
  EXPECT_EQ(p.comm_ms, 0);
  EXPECT_DOUBLE_EQ(p.step_ms, p.compute_ms + p.optimizer_ms + p.comm_exposed_ms + p.overhead_ms);
  const double tokens = 8 * 2 * 128;
  EXPECT_NEAR(p.tokens_per_s, tokens / (p.step_ms / 1e3), 1e-9 * p.tokens_per_s);
  EXPECT_NEAR(p.mfu, GptSpec(cfg.model).model_flops_per_token() * p.tokens_per_s / 1e9 / 100,
              1e-12);
  // Memory: fp32 parameters, gradients, two moments of the flat buffer; the spec's arena.
  const double n = double(GptSpec(cfg.model).registry().total_numel());
  EXPECT_EQ(p.params_bytes + p.grads_bytes + p.optimizer_bytes, 16 * n);
  EXPECT_EQ(p.activations_bytes,
            GptSpec(cfg.model).activations(gpt_options(cfg), Device::cpu, 8, 128).peak);
}

// Ops timed at known efficiencies per class calibrate back to those efficiencies, and the
// calibrated device predicts the measured step.
TEST(Plan, CalibrationReproducesTheProfileItWasFittedTo) {
  const Config cfg = Tiny();
  const PlanDevice truth = Device1();
  OpProfile ops = GptSpec(cfg.model).step_ops(gpt_options(cfg), Device::cpu, 8, 128, 2);
  double ops_ms = 0;
  for (auto& phase : ops.stat)
    for (size_t o = 0; o < kOpCount; ++o) {
      OpStat& s = phase[o];
      if (s.calls == 0) continue;
      s.ms = std::max(s.flops / 1e8, s.bytes / 2e7) / truth.efficiency[size_t(op_class(Op(o)))];
      ops_ms += s.ms;
    }
  const PlanDevice fit = calibrate(ops, 100, 20, ops_ms + 3, 0, "synthetic");
  for (size_t c = 0; c < kOpClassCount; ++c)
    EXPECT_NEAR(fit.efficiency[c], truth.efficiency[c], 1e-12) << c;
  EXPECT_NEAR(fit.step_overhead_ms, 3, 1e-9);
  EXPECT_NEAR(predict(cfg, fit, PlanCluster{}).step_ms, ops_ms + 3, 1e-9 * ops_ms);
}

// Several runs' fits: each op class's efficiency and the overhead are medians on their own.
TEST(Plan, MedianFitTakesEachClassesMedian) {
  PlanDevice a = Device1(), b = Device1(), c = Device1();
  a.efficiency = {0.1, 0.9, 0.5, 0.3}, a.step_overhead_ms = 5;
  b.efficiency = {0.2, 0.1, 0.4, 0.2}, b.step_overhead_ms = 1;
  c.efficiency = {0.3, 0.5, 0.6, 0.1}, c.step_overhead_ms = 3;
  const PlanDevice m = median_fit({a, b, c});
  EXPECT_EQ(m.efficiency, (std::array<double, kOpClassCount>{0.2, 0.5, 0.5, 0.2}));
  EXPECT_EQ(m.step_overhead_ms, 3);
  EXPECT_EQ(median_fit({a, b}).step_overhead_ms, 3);  // two: the mean of both
  EXPECT_EQ(median_fit({c}).efficiency, c.efficiency);
}

PlanCluster TwoRanks(double gbps) {
  PlanCluster c;
  c.ranks = c.per_node = 2;
  c.intra = c.inter = emulated_link(gbps, 0, {0, 0, ""});
  c.fixed_algorithm = true;
  return c;
}

// Overlap off: every bucket waits for backward's end, so all communication is exposed. On,
// with one bucket per block on a fast link, backward hides all but the embeddings' bucket.
TEST(Plan, ExposedCommIsWhatBackwardCannotHide) {
  Config cfg = Tiny();
  const GptSpec spec(cfg.model);
  cfg.comm.bucket_mb =
      4.0 * double(spec.layer_range(1).second - spec.layer_range(0).second) / 1048576.0 * 0.99;
  cfg.comm.overlap = false;
  const Prediction off = predict(cfg, Device1(), TwoRanks(1000));
  EXPECT_EQ(off.buckets, cfg.model.n_layers + 1);
  EXPECT_NEAR(off.comm_exposed_ms, off.comm_ms, 1e-12);
  cfg.comm.overlap = true;
  const Prediction on = predict(cfg, Device1(), TwoRanks(1000));
  EXPECT_NEAR(on.comm_ms, off.comm_ms, 1e-12);
  // The last bucket (the embeddings, done as backward ends) is the exposed one.
  const auto units = spec.bucket_units();
  const double emb_bytes = 4.0 * double(units.back().second - units.back().first);
  EXPECT_NEAR(on.comm_exposed_ms,
              allreduce_ms(AllreduceAlgorithm::ring, emb_bytes, 2, TwoRanks(1000).intra), 1e-9);
  EXPECT_LT(on.step_ms, off.step_ms);
  // A 1000x slower link: nothing can hide it, the exposed part grows with it.
  EXPECT_GT(predict(cfg, Device1(), TwoRanks(1)).comm_exposed_ms, 100 * on.comm_exposed_ms);
}

std::vector<Bucket> SpecBuckets(const Config& cfg) {
  const GptSpec spec(cfg.model);
  std::vector<Bucket> b = make_buckets(spec.bucket_units(), size_t(cfg.comm.bucket_mb * 1048576.0));
  std::vector<size_t> starts;
  for (const TensorInfo& t : spec.registry().tensors()) starts.push_back(t.offset);
  cut_at_tensors(b, starts);
  return b;
}

// 1-bit Adam sends one bit per element plus a scale per tensor in each bucket, as
// sign_allreduce_bytes counts them: about 1/32 of fp32's volume.
TEST(Plan, OneBitAdamSendsAboutAThirtySecondOfTheVolume) {
  Config cfg = Tiny();
  cfg.comm.bucket_mb = 0.1;  // several buckets
  const Prediction adamw = predict(cfg, Device1(), TwoRanks(1));
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  const Prediction onebit = predict(cfg, Device1(), TwoRanks(1));
  const double n = double(GptSpec(cfg.model).registry().total_numel());
  EXPECT_NEAR(adamw.sent_bytes, 4 * n, 1e-9 * n);  // 2(p-1)/p = 1 for two ranks
  double sent = 0;
  for (const Bucket& k : SpecBuckets(cfg)) {
    const size_t len = k.end - k.begin;
    sent += double(sign_allreduce_bytes(len, split_segments(k.tensor_ends, len, 0), 2));
  }
  EXPECT_GT(SpecBuckets(cfg).size(), 2u);
  EXPECT_EQ(onebit.sent_bytes, sent);
  EXPECT_GT(onebit.sent_bytes, n / 8);
  EXPECT_LT(onebit.sent_bytes, n / 8 * 1.05);
  EXPECT_LT(onebit.comm_ms, adamw.comm_ms / 20);
  EXPECT_GT(onebit.optimizer_bytes, adamw.optimizer_bytes);  // the two error buffers
}

// 0/1 Adam's run: each step's stage as its schedule says (T_v = 1-4, 6, 8; F = 8; then
// the frozen steps in groups of 2 at intervals 1, 2, 4, each group ending in a sync), a
// warm-up step as AdamW's, a compressed or sync step as 1-bit Adam's after backward, a
// local step without exchange, and the prediction their mean.
TEST(Plan, ZeroOneAdamIsTheMeanOfItsStages) {
  Config cfg = Tiny();
  cfg.comm.bucket_mb = 0.1;
  cfg.train.steps = 16;
  cfg.optimizer.zero_one = {8, 4, 2, 4};  // F, kappa, sigma, H
  const Prediction adamw = predict(cfg, Device1(), TwoRanks(1));
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  cfg.optimizer.onebit.overlap = false;
  const Prediction onebit = predict(cfg, Device1(), TwoRanks(1));
  cfg.optimizer.name = OptimizerKind::zero_one_adam;
  const Prediction z = predict(cfg, Device1(), TwoRanks(1));
  ASSERT_TRUE(z.staged);
  auto stage = [&](OneBitStage s) { return z.stages[size_t(s)]; };
  // Steps 1-4, 6, 8 warm-up; 5, 7 compressed; after F: 9, 10 (interval 1), 12, 14 (interval
  // 2, the group's last at 12), 16 (the last step) sync; 11, 13, 15 local.
  EXPECT_EQ(stage(OneBitStage::warmup).steps, 6);
  EXPECT_EQ(stage(OneBitStage::compressed).steps, 2);
  EXPECT_EQ(stage(OneBitStage::sync).steps, 5);
  EXPECT_EQ(stage(OneBitStage::local).steps, 3);
  EXPECT_DOUBLE_EQ(stage(OneBitStage::warmup).step_ms, adamw.step_ms);
  EXPECT_DOUBLE_EQ(stage(OneBitStage::warmup).sent_bytes, adamw.sent_bytes);
  EXPECT_DOUBLE_EQ(stage(OneBitStage::sync).step_ms, onebit.step_ms);
  EXPECT_DOUBLE_EQ(stage(OneBitStage::sync).sent_bytes, onebit.sent_bytes);
  EXPECT_NEAR(stage(OneBitStage::compressed).comm_exposed_ms, onebit.comm_ms, 1e-12);  // all of it
  EXPECT_EQ(stage(OneBitStage::local).sent_bytes, 0);
  EXPECT_EQ(stage(OneBitStage::local).comm_exposed_ms, 0);
  double step = 0, sent = 0;
  for (const StagePrediction& s : z.stages)
    step += s.steps * s.step_ms, sent += s.steps * s.sent_bytes;
  EXPECT_NEAR(z.step_ms, step / 16, 1e-12 * step);
  EXPECT_NEAR(z.run_sent_bytes, sent, 1e-9 * sent);
  EXPECT_NEAR(z.sent_bytes, sent / 16, 1e-9 * sent);
  EXPECT_LT(z.step_ms, adamw.step_ms);  // the link is slow: most steps send 1/32 or nothing
  // m, v, u, the anchor and the two error buffers.
  const double n = double(GptSpec(cfg.model).registry().total_numel());
  EXPECT_EQ(z.optimizer_bytes, 24 * n);
  // One rank: every step is a warm-up step, AdamW's.
  const Prediction one = predict(cfg, Device1(), PlanCluster{});
  EXPECT_EQ(one.stages[size_t(OneBitStage::warmup)].steps, 16);
  cfg.optimizer.name = OptimizerKind::adamw;
  EXPECT_DOUBLE_EQ(one.step_ms, predict(cfg, Device1(), PlanCluster{}).step_ms);
}

PlanCluster ModelParallelCluster(int ranks, int per_node, ModelParallel mp) {
  PlanCluster c;
  c.ranks = ranks;
  c.per_node = per_node;
  c.intra = {1, 10, "intra"};
  c.inter = kLink;
  c.fixed_algorithm = true;
  c.parallel = mp;
  return c;
}

// Tensor ranks each take 1/t of every op (one stage: the head and embedding too) and pay
// two collectives of the B x T x C activations per block forward, two backward, and one more
// for each block backward recomputes from its input.
TEST(PlanModelParallel, TensorRanksSplitTheOpsAndPayTheirCollectives) {
  Config cfg = Tiny();
  const Prediction one = predict(cfg, Device1(), PlanCluster{});
  const Prediction t2 = predict(cfg, Device1(), ModelParallelCluster(2, 2, {2, 1, 1}));
  EXPECT_EQ(t2.data_parallel, 1);
  EXPECT_NEAR(t2.compute_ms, one.compute_ms / 2, 1e-12 * one.compute_ms);
  EXPECT_NEAR(t2.optimizer_ms, one.optimizer_ms / 2, 1e-12 * one.optimizer_ms);
  EXPECT_EQ(t2.comm_ms, 0);  // one replica: no gradient exchange
  EXPECT_EQ(t2.bubble_ms, 0);
  const double act = 8.0 * 128 * 128 * 4;  // B x T x C fp32
  const LinkModel intra{1, 10, "intra"};
  const double coll = allreduce_ms(AllreduceAlgorithm::ring, act, 2, intra);
  EXPECT_NEAR(t2.tensor_comm_ms, 2 * coll * 4 * 4, 1e-12);  // 2 micro-batches, 4 blocks
  cfg.recompute.policy = RecomputePolicy::full;
  EXPECT_NEAR(predict(cfg, Device1(), ModelParallelCluster(2, 2, {2, 1, 1})).tensor_comm_ms,
              2 * coll * 5 * 4, 1e-12);
  EXPECT_NEAR(t2.step_ms, t2.compute_ms + t2.tensor_comm_ms + t2.bubble_ms + t2.optimizer_ms +
                              t2.comm_exposed_ms + t2.overhead_ms,
              1e-12 * t2.step_ms);
  // Memory: each tensor rank holds half of every unit (rounded up) and half the activations.
  const double n = double(GptSpec(cfg.model).registry().total_numel());
  EXPECT_NEAR(t2.params_bytes, 4 * n / 2, 4.0 * (cfg.model.n_layers + 1));
  EXPECT_DOUBLE_EQ(t2.activations_bytes, one.activations_bytes / 2);
}

// The interleaved pipeline idles (p - 1) / v micro-batches' forward and backward and sends
// the first forward and last backward across every chunk boundary; data parallelism over the
// ranks left exchanges the stage's gradients among its replicas.
TEST(PlanModelParallel, PipelineBubbleAndReplicasFollowTheirFormulas) {
  Config cfg = Tiny();
  cfg.train.grad_accum_steps = 4;
  const int per_node = 2;  // pipeline neighbours sit t x d = 2 ranks apart: another node
  for (int v : {1, 2}) {
    const Prediction p = predict(cfg, Device1(), ModelParallelCluster(8, per_node, {1, 2, v}));
    EXPECT_EQ(p.data_parallel, 4);
    const double send = 1e-3 + 8.0 * 128 * 128 * 4 / 1e6;  // the inter link: 1 us, 1 GB/s
    const double micro = p.compute_ms / 4;
    EXPECT_NEAR(p.bubble_ms, 1.0 / v * micro + 2.0 * (2 * v - 1) * send, 1e-9 * p.bubble_ms) << v;
    // The last stage's gradients: blocks 2 and 3 and its copy of the token embedding,
    // AllReduced in full (2 (d-1)/d of them) by the 4 replicas.
    const GptSpec spec(cfg.model);
    const auto units = spec.bucket_units();
    const double n = double(units[0].second - units[spec.attention_unit(2)].first) +
                     double(spec.registry().tensors()[spec.wte()].numel);
    EXPECT_NEAR(p.params_bytes, 4 * n, 1e-9 * n);
    EXPECT_NEAR(p.sent_bytes, 2 * 3.0 / 4 * 4 * n, 1e-9 * n) << v;
  }
  // v = 2 keeps fewer micro-batches in flight than v = 1: (1 + 1/4) and (1 + 1/2) of one.
  const Prediction v1 = predict(cfg, Device1(), ModelParallelCluster(8, per_node, {1, 2, 1}));
  const Prediction v2 = predict(cfg, Device1(), ModelParallelCluster(8, per_node, {1, 2, 2}));
  EXPECT_DOUBLE_EQ(v2.activations_bytes / v1.activations_bytes, 1.25 / 1.5);
}

// The sharded optimizer: the reduce-scatter half of the gradients' AllReduce, then the
// parameters' allgather in the storage dtype; each replica keeps 1/d of the moments.
TEST(PlanModelParallel, DistributedOptimizerHalvesTheExchangeAndShardsTheMoments) {
  Config cfg = Tiny();
  cfg.precision.dtype = DType::bf16;
  const PlanCluster whole = ModelParallelCluster(4, 4, {1, 1, 1, false});
  const PlanCluster sharded = ModelParallelCluster(4, 4, {1, 1, 1, true});
  const Prediction a = predict(cfg, Device1(), whole), z = predict(cfg, Device1(), sharded);
  const double n = double(GptSpec(cfg.model).registry().total_numel());
  EXPECT_NEAR(a.sent_bytes, 2 * 3.0 / 4 * 4 * n, 1e-9 * n);
  EXPECT_NEAR(z.sent_bytes, 3.0 / 4 * 4 * n + 3.0 / 4 * 2 * n, 1e-9 * n);
  EXPECT_DOUBLE_EQ(z.optimizer_bytes, a.optimizer_bytes / 4);
  EXPECT_LT(z.optimizer_ms, a.optimizer_ms);
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  EXPECT_THROW(check_parallel(cfg, sharded), InputError);
}

// Interleaved, the last stage's two chunks (blocks 3 and 1 of 4, v = 2, p = 2) run their
// last backward p micro-batches of a chunk apart: block 3's gradients are ready
// (p - 1)(v - 1) chunk backwards of bwd / v = half a micro-batch's backward sooner than
// without interleaving, and its reduction starts then. On a link too slow to hide anything,
// the exposed exchange shrinks by exactly that; on a fast one only the last buckets, ready
// as backward ends (at most block 1's and the token embedding's copy), show, alike in both.
TEST(PlanModelParallel, InterleavedChunksReduceUnderTheDrain) {
  Config cfg = Tiny();        // 4 layers, 2 micro-batches
  cfg.comm.bucket_mb = 1e-3;  // a bucket per unit
  for (double gbps : {1e-3, 1e4}) {
    PlanCluster one = ModelParallelCluster(4, 4, {1, 2, 1});
    one.intra = one.inter = {1, gbps, "link"};
    PlanCluster two = one;
    two.parallel.virtual_stages = 2;
    const Prediction p1 = predict(cfg, Device1(), one), p2 = predict(cfg, Device1(), two);
    ASSERT_EQ(p1.data_parallel, 2);
    EXPECT_DOUBLE_EQ(p1.backward_ms, p2.backward_ms);
    const double bwd = p1.backward_ms / 2;  // the last micro-batch's, on this stage
    if (gbps < 1) {
      EXPECT_GT(p1.comm_exposed_ms, p1.comm_ms - 2 * bwd);  // nothing hides it
      EXPECT_NEAR(p1.comm_exposed_ms - p2.comm_exposed_ms, bwd / 2, 1e-9 * p1.comm_ms) << gbps;
    } else {
      const GptSpec spec(cfg.model);
      const double emb = 4.0 * double(spec.registry().tensors()[spec.wte()].numel);
      const LinkModel link{1, gbps, ""};
      const double block = 4.0 * double(spec.layer_range(1).second - spec.layer_range(1).first);
      EXPECT_LE(p1.comm_exposed_ms, allreduce_ms(AllreduceAlgorithm::ring, block, 2, link) +
                                        allreduce_ms(AllreduceAlgorithm::ring, emb, 2, link) +
                                        1e-12);
      EXPECT_LT(p1.comm_exposed_ms, p1.comm_ms);  // block 3's bucket hides
      EXPECT_DOUBLE_EQ(p2.comm_exposed_ms, p1.comm_exposed_ms);
    }
  }
}

// Transformer Engine's overlap: each half of a block's collectives (allgather or
// reduce-scatter) sits beside one product and shows only where it outlasts it. On a fast
// link nothing shows; on a slow one all of it but the products' time.
TEST(PlanModelParallel, TensorCommOverlapHidesCollectivesUnderTheirProducts) {
  const Config cfg = Tiny();
  const ModelParallel plain{2, 1, 1}, hidden{2, 1, 1, false, true};
  double gemm_ms = 0;  // a tensor rank's share of the block products, forward and backward
  const OpProfile ops = GptSpec(cfg.model).step_ops(gpt_options(cfg), Device::cpu, 8, 128, 2);
  for (OpPhase phase : {OpPhase::forward, OpPhase::backward})
    for (Op op : {Op::qkv, Op::attn_proj, Op::mlp_fc, Op::mlp_proj}) {
      const OpStat& s = ops.at(phase, op);
      gemm_ms += std::max(s.flops / 1e8, s.bytes / 2e7) / 0.5 / 2;
    }
  for (double gbps : {1e4, 1e-2}) {
    PlanCluster a = ModelParallelCluster(2, 2, plain), b = ModelParallelCluster(2, 2, hidden);
    a.intra = b.intra = {0, gbps, "link"};
    const Prediction pa = predict(cfg, Device1(), a), pb = predict(cfg, Device1(), b);
    const double coll = allreduce_ms(AllreduceAlgorithm::ring, 8.0 * 128 * 128 * 4, 2, a.intra);
    EXPECT_NEAR(pa.tensor_comm_ms, 2 * coll * 4 * 4, 1e-9 * pa.tensor_comm_ms);
    if (gbps > 1)
      EXPECT_EQ(pb.tensor_comm_ms, 0);
    else
      EXPECT_NEAR(pb.tensor_comm_ms, pa.tensor_comm_ms - gemm_ms, 1e-9 * pa.tensor_comm_ms);
    EXPECT_NEAR(pa.step_ms - pb.step_ms, pa.tensor_comm_ms - pb.tensor_comm_ms, 1e-12 * pa.step_ms);
  }
  EXPECT_THROW(check_parallel(cfg, ModelParallelCluster(2, 2, {1, 1, 1, false, true})), InputError);
}

// 10 ms of allgather, 4 ms of forward per micro-batch. One stage: 6 ms show. Two stages of
// two chunks (2 ms of forward each): the fill gives 2 ms, chunk 0 needs its 5 ms by then
// (3 late), chunk 1 all 10 by 2 + 4 (4 late). Four chunks: 2.5 ms each, 1 ms chunk
// forwards, deadlines 1, 3, 5, 7: the last is 3 late. A long fill hides it all.
TEST(PlanModelParallel, ParameterAllgatherHidesUnderTheFillAndEachChunksFirstForward) {
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(10, 4, 1, 1), 6);
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(10, 4, 2, 1), 6);
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(10, 4, 2, 2), 4);
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(10, 4, 2, 4), 3);
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(10, 4, 8, 2), 0);
  EXPECT_DOUBLE_EQ(allgather_exposed_ms(3, 4, 1, 1), 0);
}

TEST(PlanModelParallel, LayoutsThatCannotHoldTheModelAreRefused) {
  Config cfg = Tiny();  // 4 heads, 4 layers
  cfg.train.grad_accum_steps = 3;
  for (const auto& [cl, fragment] : std::vector<std::pair<PlanCluster, std::string>>{
           {ModelParallelCluster(6, 6, {4, 1, 1}), "not a multiple"},
           {ModelParallelCluster(8, 2, {4, 1, 1}), "inside a node"},
           {ModelParallelCluster(24, 8, {8, 1, 1}), "n_heads"},
           {ModelParallelCluster(8, 8, {1, 8, 1}), "n_layers"},
           {ModelParallelCluster(8, 8, {1, 2, 2}), "interleaved"},  // 3 micro-batches, 2 stages
           {ModelParallelCluster(8, 8, {2, 2, 1}), ""},
       }) {
    if (fragment.empty()) {
      EXPECT_NO_THROW(check_parallel(cfg, cl));
      continue;
    }
    try {
      check_parallel(cfg, cl);
      ADD_FAILURE() << "accepted: " << fragment;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

// A finished run's cluster: its emulated link when it had one; else, with network facts for
// every rank, one rank per host over the slowest interface; else one node's shared memory.
TEST(Plan, RunClusterTakesTheSlowestRecordedLink) {
  ReportData r;
  r.config = Tiny();
  r.world = 2;
  const LinkModel shm = table_link("shm");
  EXPECT_EQ(run_cluster(r, nullptr).intra.busbw_gbs, shm.busbw_gbs);
  EXPECT_EQ(run_cluster(r, nullptr).per_node, 2);
  RankLink fast, slow;
  fast.interface = slow.interface = "eth0";
  fast.rate_gbps = 1, slow.rate_gbps = 0.1;
  r.comm.links = {fast, slow};
  const PlanCluster hosts = run_cluster(r, nullptr);
  EXPECT_EQ(hosts.per_node, 1);
  EXPECT_DOUBLE_EQ(hosts.intra.busbw_gbs, 0.1 / 8);
  EXPECT_DOUBLE_EQ(hosts.inter.busbw_gbs, 0.1 / 8);
  r.comm.links[1].rate_gbps = NAN;  // one rank's rate unknown: not a known network
  EXPECT_EQ(run_cluster(r, nullptr).intra.busbw_gbs, shm.busbw_gbs);
  r.comm.links[1].rate_gbps = 0.1;
  r.config.comm.link.bandwidth_gbps = 10;  // emulation wins: the ranks paced themselves
  EXPECT_DOUBLE_EQ(run_cluster(r, nullptr).intra.busbw_gbs, 10.0 / 8);
}

TEST(Plan, FitLinkRecoversAlphaAndBusbw) {
  const fs::path f = fs::temp_directory_path() / ("plan_bench_" + std::to_string(getpid()));
  {
    std::ofstream out(f);
    out.precision(17);
    // 4 ranks, alpha 3 us, busbw 5 GB/s; one small row that the fit must skip.
    for (double bytes : {1024.0, 65536.0, 1048576.0, 16777216.0}) {
      const double t = 6 * 3 + bytes * 1.5 / 5e3;  // us
      out << R"({"algo":"ring","dtype":"fp32","ranks":4,"bytes":)" << bytes
          << R"(,"count":1,"time_us":)" << (bytes <= 16384 ? 1e6 : t)
          << R"(,"algbw_gbs":0,"busbw_gbs":0,"wrong":0})"
          << "\n";
    }
  }
  const LinkModel l = fit_link(f.string(), "ring");
  EXPECT_NEAR(l.alpha_us, 3, 1e-6);
  EXPECT_NEAR(l.busbw_gbs, 5, 1e-9);
  EXPECT_THROW(fit_link(f.string(), "native"), InputError);
  { std::ofstream(f) << "not json\n"; }
  EXPECT_THROW(fit_link(f.string(), "ring"), InputError);
  fs::remove(f);
  EXPECT_THROW(fit_link(f.string(), "ring"), InputError);
}

TEST(Plan, TablesRefuseUnknownNames) {
  EXPECT_EQ(table_device("h100-sxm", DType::bf16).peak_gflops, 989e3);
  EXPECT_EQ(table_device("h200-sxm", DType::bf16).mem_bandwidth_gbs, 4800);
  EXPECT_THROW(table_device("a100", DType::bf16), InputError);
  EXPECT_THROW(table_link("ethernet"), InputError);
  EXPECT_THROW(cpu_calibration_from_json(nlohmann::json::object(), "x.json"), InputError);
  nlohmann::json j = to_json(default_cpu_calibration());
  EXPECT_EQ(cpu_calibration_from_json(j, "x.json").efficiency,
            default_cpu_calibration().efficiency);
  j["efficiency"]["matmul"] = -1;
  EXPECT_THROW(cpu_calibration_from_json(j, "x.json"), InputError);
}

// One rank of 2 threads on 2 cores gets both cores and the node's bandwidth; two ranks of
// one thread one core and half the bandwidth each; four oversubscribed ranks half a core.
TEST(Plan, CpuDeviceSharesTheNodeAmongItsRanks) {
  CpuCalibration c = default_cpu_calibration();
  c.cores = 2, c.peak_gflops_per_core_fp32 = 100, c.peak_gflops_per_core_bf16 = 300;
  c.node_bandwidth_gbs = 40;
  EXPECT_EQ(cpu_device(c, DType::f32, 2, 1).peak_gflops, 200);
  EXPECT_EQ(cpu_device(c, DType::bf16, 1, 2).peak_gflops, 300);
  EXPECT_EQ(cpu_device(c, DType::f32, 1, 2).mem_bandwidth_gbs, 20);
  EXPECT_EQ(cpu_device(c, DType::f32, 1, 4).peak_gflops, 50);
}

struct Result {
  int code;
  std::string output;
};

Result RunPlan(const std::string& args) {
  const std::string cmd = std::string(RINGSTEP_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string TinyYaml() { return std::string(RINGSTEP_SOURCE_DIR) + "/configs/tiny.yaml"; }

TEST(PlanCli, BadInputsExitWithCodeTwo) {
  const std::string tiny = TinyYaml();
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"plan", "give a CONFIG"},
           {"plan /no/such.yaml", "such.yaml"},
           {"plan " + tiny + " --ranks 0", "--ranks"},
           {"plan " + tiny + " --ranks x", "--ranks"},
           {"plan " + tiny + " --gpus-per-node 0", "--gpus-per-node"},
           {"plan " + tiny + " --link-gbps -1", "--link-gbps"},
           {"plan " + tiny + " --device tpu", "--device"},
           {"plan " + tiny + " --set model.n_heads=3", "n_heads"},
           {"plan " + tiny + " --ranks 3 --set train.global_batch=16", "global_batch"},
           {"plan " + tiny + " --check /tmp", "--check"},
           {"plan " + tiny + " --ranks 4 --tensor-parallel 3", "tensor x pipeline"},
           {"plan " + tiny + " --ranks 4 --pipeline-parallel 0", "--pipeline-parallel"},
           {"plan " + tiny + " --ranks 4 --pipeline-parallel 2 --virtual-stages 2 --set "
            "train.grad_accum_steps=3", "interleaved"},
           {"plan " + tiny + " --ranks 2 --tp-comm-overlap", "--tp-comm-overlap"},
           {"plan --check /no/such/run", "not found"},
           {"plan --calibrate /no/such/run", "not found"},
           {"plan " + tiny + " --calibration /no/such.json", "such.json"},
           {"plan " + tiny + " --bench /no/such.jsonl", "such.jsonl"},
           {"plan --check /tmp --output x.json", "--output"},
       }) {
    const Result r = RunPlan(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
  }
}

class PlanCalibrate : public testing::TempDirTest {};

// One calibration is fitted to one shape: runs of another dtype are refused, before any
// measurement, with exit 2.
TEST_F(PlanCalibrate, RunsOfAnotherShapeExitWithCodeTwo) {
  const std::string run = std::string(RINGSTEP_BINARY) + " train " + TinyYaml() +
                          " --set train.steps=2 --set train.eval_every=0 --set "
                          "train.eval_batches=1 --set profile.op_every=1 --set "
                          "profile.peak_gflops=100 --set run.threads=1 --set run.out_dir=";
  ASSERT_EQ(std::system((run + path("f32") + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_EQ(
      std::system((run + path("bf16") + " --set precision.dtype=bf16 >/dev/null 2>&1").c_str()), 0);
  const Result r = RunPlan("plan --calibrate " + path("f32") + " " + path("bf16"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("another shape"), std::string::npos) << r.output;
}

TEST(PlanCli, JsonHasTheStepAndItsParts) {
  const Result r =
      RunPlan("plan " + TinyYaml() + " --device h100-sxm --ranks 64 --gpus-per-node 8 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* key : {"step_ms", "compute_ms", "comm_exposed_ms", "tokens_per_s", "mfu"})
    EXPECT_TRUE(j.contains(key) && j[key].is_number()) << key;
  EXPECT_NEAR(j["step_ms"].get<double>(),
              j["compute_ms"].get<double>() + j["tensor_comm_ms"].get<double>() +
                  j["bubble_ms"].get<double>() + j["optimizer_ms"].get<double>() +
                  j["comm_exposed_ms"].get<double>() + j["overhead_ms"].get<double>(),
              1e-9);
  EXPECT_EQ(j["ranks"], 64);
  EXPECT_FALSE(j["knobs"].empty());
}

}  // namespace
}  // namespace ringstep
