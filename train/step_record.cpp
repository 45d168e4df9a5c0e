#include "train/step_record.h"

#include "comm/bench.h"
#include "train/json_fields.h"

namespace ringstep {

using json = nlohmann::json;

// Numbers in a record carry no more digits than the clocks resolve: times to 1 us.
constexpr Num kMs{.decimals = 3};
constexpr Num kMsLater{.decimals = 3, .added_later = true};
constexpr int64_t kMaxStep = std::numeric_limits<int>::max();

// recompute and comm came later than the other phases: records without them still read.
static bool phase_added_later(const PhaseField& f) {
  return f.ms == &PhaseTimes::recompute || f.ms == &PhaseTimes::comm;
}

template <class Io>
void fields(Io& io, PhaseTimes& t) {
  for (const PhaseField& f : kPhaseFields)
    io(f.name, t.*f.ms, phase_added_later(f) ? kMsLater : kMs);
}

template <class Io>
void fields(Io& io, Spread& s) {
  io("min", s.min, kMs);
  io("median", s.median, kMs);
  io("max", s.max, kMs);
}

using PhaseSpreads = std::array<Spread, kPhaseFields.size()>;

// Every phase but the step itself (the step's spread is step_ms_*).
template <class Io>
void fields(Io& io, PhaseSpreads& p) {
  for (size_t f = 1; f < kPhaseFields.size(); ++f)
    io(kPhaseFields[f].name, p[f], Any{.added_later = phase_added_later(kPhaseFields[f])});
}

template <class Io>
void fields(Io& io, RanksBlock& k) {
  io("world", k.world, Int{.lo = 1, .hi = kMaxWorld});
  io("step_ms_min", k.step_ms.min, kMs);
  io("step_ms_median", k.step_ms.median, kMs);
  io("step_ms_max", k.step_ms.max, kMs);
  io("slowest", k.slowest, Int{.lo = 0, .hi = kMaxWorld});
  io("phase_ms", k.phase_ms, Any{.added_later = true});
  io("busy_ms_median", k.busy_ms_median, kMsLater);
  io("busy_ms_max", k.busy_ms_max, kMsLater);
  io("straggler", k.straggler,
     Int{.lo = 0, .hi = kMaxWorld, .none = NoneAs::null, .none_value = -1, .added_later = true});
}
// A record of a run without a ranks block (world 0) leaves the key out.
static bool is_none(const RanksBlock& k, const Any&) { return k.world == 0; }

template <class Io>
void fields(Io& io, MemBytes& m) {
  io("params", m.params, Int{});
  io("grads", m.grads, Int{});
  io("optimizer", m.optimizer, Int{});
  io("activations_peak", m.activations_peak, Int{});
}

namespace {

// One element of `ops`: {"phase", "op", "calls", "ms", "flops", "bytes"}.
struct OpEntry {
  OpPhase phase = OpPhase::forward;
  Op op = Op::qkv;
  OpStat stat;
};

template <class Io>
void fields(Io& io, OpEntry& e) {
  io("phase", e.phase, Any{});
  io("op", e.op, Any{});
  io("calls", e.stat.calls, Int{});
  io("ms", e.stat.ms, kMs);
  io("flops", e.stat.flops, Num{});
  io("bytes", e.stat.bytes, Num{});
}

}  // namespace

// The ops that ran, in phase then op order; only op-timed steps have any.
static bool is_none(const OpProfile& p, const Any&) { return p.empty(); }

static ojson encode(const OpProfile& p, const Any& spec) {
  ojson list = ojson::array();
  for (const auto& [phase, phase_name] : enum_names(OpPhase{}))
    for (const auto& [op, op_name] : enum_names(Op{}))
      if (p.at(phase, op).calls > 0)
        list.push_back(encode(OpEntry{phase, op, p.at(phase, op)}, spec));
  return list;
}

static void decode(const json& j, OpProfile& p, const Any& spec, const JsonPlace& at) {
  if (!j.is_array()) at.fail("must be a list, got " + shown(j));
  for (size_t i = 0; i < j.size(); ++i) {
    OpEntry e;
    decode(j[i], e, spec, JsonPlace{at.where, at.path + "[" + std::to_string(i) + "]"});
    p.at(e.phase, e.op) = e.stat;
  }
}

template <class Io>
void fields(Io& io, StepRecord& r) {
  io("step", r.step, Int{.lo = 1, .hi = kMaxStep});
  io("loss", r.loss, Num{.none = NoneAs::null});  // null: a non-finite loss
  io("val_loss", r.val_loss, Num{.none = NoneAs::omitted});
  io("lr", r.lr, Num{});
  io("tokens", r.tokens, Int{.lo = 1});
  io("grad_norm", r.grad_norm, Num{.none = NoneAs::null});  // null: not computed (skipped)
  io("loss_scale", r.loss_scale, Num{});
  io("skipped", r.skipped, Any{});
  io("time_ms", r.time_ms, Any{});
  io("ranks", r.ranks, Any{.none = NoneAs::omitted});
  io("tokens_per_s", r.tokens_per_s, Num{.decimals = 1});
  io("model_gflops", r.model_gflops, Num{.decimals = 3});
  io("mfu", r.mfu, Num{.decimals = 4});
  io("hardware_gflops", r.hardware_gflops, Num{.decimals = 3, .added_later = true});
  io("comm_bytes", r.comm_bytes, Int{});
  io("comm_sent_bytes", r.comm_sent_bytes, Int{.added_later = true});
  io("comm_busbw_gbs", r.comm_busbw_gbs, Num{.decimals = 4, .added_later = true});
  io("stage", r.stage, Any{.none = NoneAs::omitted});  // 1-bit Adam runs only
  io("compression_error", r.compression_error, Num{.decimals = 6, .none = NoneAs::omitted});
  io("mem_bytes", r.mem_bytes, Any{});
  io("ops", r.ops, Any{.none = NoneAs::omitted});
  io("time_unix", r.time_unix, Num{.decimals = 3, .added_later = true});
}

ojson to_json(const StepRecord& r) { return encode(r, Any{}); }

std::string record_line(const StepRecord& r) { return dump_json(to_json(r)); }

StepRecord step_record_from_json(const json& j, const std::string& where) {
  StepRecord r;
  decode(j, r, Any{}, JsonPlace{where, ""});
  return r;
}

std::vector<std::string> step_record_field_names() {
  std::vector<std::string> names;
  StepRecord r;
  FieldNames lister{"", &names};
  fields(lister, r);
  return names;
}

double model_flops_utilization(double model_gflops, double peak_gflops) {
  return peak_gflops > 0 ? model_gflops / peak_gflops : 0;
}

Throughput throughput(double tokens, double step_ms, double flops_per_token, int world,
                      double peak_gflops) {
  Throughput t;
  if (step_ms <= 0 || world <= 0) return t;
  t.tokens_per_s = tokens / (step_ms / 1e3);
  t.model_gflops = flops_per_token * t.tokens_per_s / 1e9 / world;
  t.mfu = model_flops_utilization(t.model_gflops, peak_gflops);
  return t;
}

double busbw_gbs(uint64_t bytes, double ms, int world) {
  if (ms <= 0 || world <= 0) return 0;
  return double(bytes) / (ms / 1e3) / 1e9 * allreduce_busbw_factor(world);
}

}  // namespace ringstep
