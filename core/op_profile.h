// Per-op timing of one step (profile.op_every, docs/logs.md): every op of forward, backward
// and the optimizer update, with its calls, milliseconds on the phases' steady clock, and
// the FLOPs and bytes its arguments imply (docs/metrics.md, "Measured roofline"). The
// ops are timed where they are called: at the backend seam (core/timed_backend.h) and
// around the optimizer update (train/trainer.cpp). Not thread-safe: the training thread's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_clock.h"
#include "core/enum_names.h"
#include "core/profiler.h"
#include "core/trace.h"

namespace ringstep {

// The ops a step is made of. Matrix products are named by their weight (qkv, attn_proj,
// mlp_fc, mlp_proj, lm_head); cast_weights is a 16-bit backend rounding its weight copy.
enum class Op : uint8_t {
  embedding,
  layernorm,
  qkv,
  attention,
  attn_proj,
  mlp_fc,
  gelu,
  mlp_proj,
  lm_head,
  softmax_xent,
  zero,
  cast_weights,
  optimizer,
};
constexpr auto enum_names(Op) {
  return std::to_array<EnumName<Op>>({{Op::embedding, "embedding"},
                                      {Op::layernorm, "layernorm"},
                                      {Op::qkv, "qkv"},
                                      {Op::attention, "attention"},
                                      {Op::attn_proj, "attn_proj"},
                                      {Op::mlp_fc, "mlp_fc"},
                                      {Op::gelu, "gelu"},
                                      {Op::mlp_proj, "mlp_proj"},
                                      {Op::lm_head, "lm_head"},
                                      {Op::softmax_xent, "softmax_xent"},
                                      {Op::zero, "zero"},
                                      {Op::cast_weights, "cast_weights"},
                                      {Op::optimizer, "optimizer"}});
}
inline constexpr size_t kOpCount = enum_names(Op{}).size();

// The phase an op ran in (a forward op that backward recomputes ran in backward).
enum class OpPhase : uint8_t { forward, backward, optimizer };
constexpr auto enum_names(OpPhase) {
  return std::to_array<EnumName<OpPhase>>({{OpPhase::forward, "forward"},
                                           {OpPhase::backward, "backward"},
                                           {OpPhase::optimizer, "optimizer"}});
}
inline constexpr size_t kOpPhaseCount = enum_names(OpPhase{}).size();

// What one call computes and moves: FLOPs and the compulsory memory traffic in bytes.
struct OpCost {
  double flops = 0, bytes = 0;
};

struct OpStat {
  int64_t calls = 0;
  double ms = 0, flops = 0, bytes = 0;
};

// One step's ops on one rank, by phase and op.
struct OpProfile {
  std::array<std::array<OpStat, kOpCount>, kOpPhaseCount> stat{};

  OpStat& at(OpPhase p, Op op) { return stat[size_t(p)][size_t(op)]; }
  const OpStat& at(OpPhase p, Op op) const { return stat[size_t(p)][size_t(op)]; }
  bool empty() const;
  double phase_ms(OpPhase p) const;  // the sum of the phase's op times
};

// The stopwatch the ops read. Off (the default) it reads no clock; start() points it at a
// profile and a phase until stop().
// On a device (time_on_device) an op is the time between two marks on the compute stream,
// not the host's time to enqueue it: begin() and end() record marks and return at once, and
// stop() waits for the phase's last mark and settles every op of the phase into the
// profile (so an op-timed step waits for the device once per timed phase). Trace spans are
// placed on the host's clock at start() plus the device time since the phase's first mark.
class OpClock {
 public:
  void time_on_device(std::unique_ptr<DeviceClock> clock) { device_ = std::move(clock); }
  // Times ops into PROFILE's PHASE (null: stay off); TRACE, when not null, gets one span per
  // op call on the compute lane, for STEP.
  void start(OpProfile* profile, OpPhase phase, TraceRecorder* trace, int step);
  void stop();
  bool on() const { return profile_ != nullptr; }
  // The start of an op (0 when off): host nanoseconds, or a device mark.
  int64_t begin();
  // Ends the op that began at T0: one call of OP with COST.
  void end(Op op, int64_t t0, const OpCost& cost);

 private:
  struct DeviceOp {
    Op op;
    int from, to;
    OpCost cost;
  };
  void add(Op op, double ms, const OpCost& cost, int64_t t0_ns, int64_t t1_ns);

  OpProfile* profile_ = nullptr;
  OpPhase phase_ = OpPhase::forward;
  TraceRecorder* trace_ = nullptr;
  int step_ = 0;
  std::unique_ptr<DeviceClock> device_;
  int64_t start_ns_ = 0;   // host time at start(), on a device
  int start_mark_ = 0;     // the device mark made at start()
  std::vector<DeviceOp> pending_;  // this phase's ops, read at stop()
};

// Times the ops of one phase for its lifetime: CLOCK.start(...) then stop() (nothing when
// PROFILE is null).
class OpPhaseScope {
 public:
  OpPhaseScope(OpClock& clock, OpProfile* profile, OpPhase phase, TraceRecorder* trace, int step)
      : clock_(clock) {
    clock_.start(profile, phase, trace, step);
  }
  ~OpPhaseScope() { clock_.stop(); }
  OpPhaseScope(const OpPhaseScope&) = delete;
  OpPhaseScope& operator=(const OpPhaseScope&) = delete;

 private:
  OpClock& clock_;
};

}  // namespace ringstep
