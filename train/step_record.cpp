#include "train/step_record.h"

#include "core/error.h"

namespace ringstep {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// Numbers in a record carry no more digits than the clocks resolve.
double round_to(double x, double q) { return std::round(x / q) * q; }

ojson ranks_json(const RanksBlock& k) {
  ojson j = {{"world", k.world},
             {"step_ms_min", k.step_ms.min},
             {"step_ms_median", k.step_ms.median},
             {"step_ms_max", k.step_ms.max},
             {"slowest", k.slowest}};
  ojson phases;
  for (size_t f = 1; f < kPhaseFields.size(); ++f)  // every phase but the step itself
    phases[kPhaseFields[f].name] = {
        {"min", k.phase_ms[f].min}, {"median", k.phase_ms[f].median}, {"max", k.phase_ms[f].max}};
  j["phase_ms"] = phases;
  j["busy_ms_median"] = k.busy_ms_median;
  j["busy_ms_max"] = k.busy_ms_max;
  j["straggler"] = k.straggler >= 0 ? ojson(k.straggler) : ojson(nullptr);
  return j;
}

double number_at(const json& obj, const char* key, const std::string& where, const char* path) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number())
    throw InputError(where + ": missing number '" + path + "'");
  return it->get<double>();
}

const json& object_or_empty(const json& j, const char* key) {
  static const json kEmpty = json::object();
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}

RanksBlock ranks_from_json(const json& k) {
  RanksBlock b;
  b.world = int(json_number_or(k, "world", 0));
  b.step_ms = {json_number_or(k, "step_ms_min", 0), json_number_or(k, "step_ms_median", 0),
               json_number_or(k, "step_ms_max", 0)};
  b.slowest = int(json_number_or(k, "slowest", -1));
  const json& phases = object_or_empty(k, "phase_ms");
  for (size_t f = 1; f < kPhaseFields.size(); ++f) {
    const json& p = object_or_empty(phases, kPhaseFields[f].name);
    b.phase_ms[f] = {json_number_or(p, "min", 0), json_number_or(p, "median", 0),
                     json_number_or(p, "max", 0)};
  }
  b.busy_ms_median = json_number_or(k, "busy_ms_median", 0);
  b.busy_ms_max = json_number_or(k, "busy_ms_max", 0);
  b.straggler = int(json_number_or(k, "straggler", -1));
  return b;
}

// [{"phase", "op", "calls", "ms", "flops", "bytes"}, ...]: the ops that ran, in phase then
// op order.
ojson ops_json(const OpProfile& p) {
  ojson list = ojson::array();
  for (const auto& [phase, phase_name] : enum_names(OpPhase{}))
    for (const auto& [op, op_name] : enum_names(Op{})) {
      const OpStat& s = p.at(phase, op);
      if (s.calls == 0) continue;
      list.push_back({{"phase", phase_name},
                      {"op", op_name},
                      {"calls", s.calls},
                      {"ms", round_to(s.ms, 1e-3)},
                      {"flops", s.flops},
                      {"bytes", s.bytes}});
    }
  return list;
}

OpProfile ops_from_json(const json& list, const std::string& where) {
  OpProfile p;
  if (!list.is_array()) throw InputError(where + ": 'ops' must be a list");
  for (const json& e : list) {
    const auto text = [&](const char* key) {
      auto it = e.find(key);
      if (it == e.end() || !it->is_string())
        throw InputError(where + ": an entry of 'ops' lacks the string '" + key + "'");
      return it->get<std::string>();
    };
    OpStat& s = p.at(parse_name<OpPhase>(text("phase"), where + ": ops phase"),
                     parse_name<Op>(text("op"), where + ": op"));
    s.calls = int64_t(number_at(e, "calls", where, "ops.calls"));
    s.ms = number_at(e, "ms", where, "ops.ms");
    s.flops = json_number_or(e, "flops", 0);
    s.bytes = json_number_or(e, "bytes", 0);
  }
  return p;
}

}  // namespace

ojson to_json(const StepRecord& r) {
  ojson j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  if (!std::isnan(r.val_loss)) j["val_loss"] = r.val_loss;
  j["lr"] = r.lr;
  j["tokens"] = r.tokens;
  j["grad_norm"] = std::isnan(r.grad_norm) ? ojson(nullptr) : ojson(r.grad_norm);
  j["loss_scale"] = r.loss_scale;
  j["skipped"] = r.skipped;
  ojson t;
  for (const PhaseField& f : kPhaseFields) t[f.name] = round_to(r.time_ms.*f.ms, 1e-3);
  j["time_ms"] = t;
  if (r.ranks.world > 0) j["ranks"] = ranks_json(r.ranks);
  j["tokens_per_s"] = round_to(r.tokens_per_s, 0.1);
  j["model_gflops"] = round_to(r.model_gflops, 1e-3);
  j["mfu"] = round_to(r.mfu, 1e-4);
  j["hardware_gflops"] = round_to(r.hardware_gflops, 1e-3);
  j["comm_bytes"] = r.comm_bytes;
  j["comm_sent_bytes"] = r.comm_sent_bytes;
  j["comm_busbw_gbs"] = round_to(r.comm_busbw_gbs, 1e-4);
  if (r.stage) j["stage"] = name(*r.stage);
  if (!std::isnan(r.compression_error))
    j["compression_error"] = round_to(r.compression_error, 1e-6);
  j["mem_bytes"] = {{"params", r.mem_bytes.params},
                    {"grads", r.mem_bytes.grads},
                    {"optimizer", r.mem_bytes.optimizer},
                    {"activations_peak", r.mem_bytes.activations_peak}};
  if (!r.ops.empty()) j["ops"] = ops_json(r.ops);
  return j;
}

StepRecord step_record_from_json(const json& j, const std::string& where) {
  StepRecord r;
  r.step = int(number_at(j, "step", where, "step"));
  r.loss = number_at(j, "loss", where, "loss");
  r.tokens = number_at(j, "tokens", where, "tokens");
  r.val_loss = json_number_or(j, "val_loss", StepRecord::kNaN);
  r.lr = json_number_or(j, "lr", 0);
  r.grad_norm = json_number_or(j, "grad_norm", StepRecord::kNaN);
  r.loss_scale = json_number_or(j, "loss_scale", 1);
  r.skipped = j.contains("skipped") && j["skipped"].is_boolean() && j["skipped"].get<bool>();
  auto tm = j.find("time_ms");
  if (tm == j.end() || !tm->is_object()) throw InputError(where + ": missing object 'time_ms'");
  for (const PhaseField& f : kPhaseFields) {
    // recompute and comm came later than the others: records without them still read.
    const bool optional = f.ms == &PhaseTimes::recompute || f.ms == &PhaseTimes::comm;
    const std::string path = std::string("time_ms.") + f.name;
    r.time_ms.*f.ms =
        optional ? json_number_or(*tm, f.name, 0) : number_at(*tm, f.name, where, path.c_str());
  }
  if (auto rk = j.find("ranks"); rk != j.end() && rk->is_object()) r.ranks = ranks_from_json(*rk);
  r.tokens_per_s = json_number_or(j, "tokens_per_s", 0);
  r.model_gflops = json_number_or(j, "model_gflops", 0);
  r.mfu = json_number_or(j, "mfu", 0);
  r.hardware_gflops = json_number_or(j, "hardware_gflops", 0);
  r.comm_bytes = uint64_t(json_number_or(j, "comm_bytes", 0));
  r.comm_sent_bytes = uint64_t(json_number_or(j, "comm_sent_bytes", 0));
  r.comm_busbw_gbs = json_number_or(j, "comm_busbw_gbs", 0);
  if (auto st = j.find("stage"); st != j.end() && st->is_string()) {
    r.stage = find_name<OneBitStage>(st->get<std::string>());
    if (!r.stage) throw InputError(where + ": unknown stage '" + st->get<std::string>() + "'");
  }
  r.compression_error = json_number_or(j, "compression_error", StepRecord::kNaN);
  const json& mem = object_or_empty(j, "mem_bytes");
  r.mem_bytes = {uint64_t(json_number_or(mem, "params", 0)),
                 uint64_t(json_number_or(mem, "grads", 0)),
                 uint64_t(json_number_or(mem, "optimizer", 0)),
                 uint64_t(json_number_or(mem, "activations_peak", 0))};
  if (auto ops = j.find("ops"); ops != j.end()) r.ops = ops_from_json(*ops, where);
  return r;
}

double json_number_or(const json& obj, const char* key, double fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : fallback;
}

double busbw_gbs(uint64_t bytes, double ms, int world) {
  if (ms <= 0 || world <= 0) return 0;
  return double(bytes) / (ms / 1e3) / 1e9 * 2.0 * (world - 1) / world;
}

}  // namespace ringstep
