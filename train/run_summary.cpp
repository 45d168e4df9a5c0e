#include "train/run_summary.h"

#include "train/json_fields.h"
#include "train/step_record.h"

namespace ringstep {

using json = nlohmann::json;

static constexpr Num kMs{.decimals = 3};
static constexpr Int kSteps{.hi = std::numeric_limits<int>::max()};

// An unknown count or rate is null.
static constexpr Int kCount{.none = NoneAs::null, .none_value = -1};
static constexpr Num kGbps{.decimals = 6, .none = NoneAs::null};

template <class Io>
void fields(Io& io, NetSnapshot& n) {
  io("link_gbps", n.link_gbps, kGbps);
  io("cap_gbps", n.cap_gbps, kGbps);
  io("tcp_out_segs", n.tcp_out_segs, kCount);
  io("tcp_retrans_segs", n.tcp_retrans_segs, kCount);
  io("tx_bytes", n.tx_bytes, kCount);
  io("rx_bytes", n.rx_bytes, kCount);
  io("tx_dropped", n.tx_dropped, kCount);
  io("rx_dropped", n.rx_dropped, kCount);
  io("tx_errors", n.tx_errors, kCount);
  io("rx_errors", n.rx_errors, kCount);
}

template <class Io>
void fields(Io& io, NetFacts& f) {
  io("interface", f.interface, Any{});
  io("start", f.start, Any{});
  io("end", f.end, Any{});
}

// The numbers are written as they are (shortest round trip), so that the decision read back
// is the one made; `compressed` and `compressed_exposed_ms` are derived from them, written
// for the reader of the file and not read back.
template <class Io>
void fields(Io& io, CompressChoice& c) {
  bool compressed = c.compress();
  double predicted = c.compressed_exposed_ms();
  io("compressed", compressed, Any{});
  io("from_step", c.from_step, kSteps);
  io("fp32_exposed_ms", c.exposed_ms, Num{});
  io("fp32_comm_ms", c.comm_ms, Num{});
  io("fp32_sent_bytes", c.sent_bytes, Num{});
  io("onebit_sent_bytes", c.sign_bytes, Num{});
  io("code_ms", c.code_ms, Num{});
  io("compressed_exposed_ms", predicted, kMs);
}

template <class Io>
void fields(Io& io, RunSummary& s) {
  io("format_version", s.format_version, Int{.lo = 2, .hi = kSummaryFormat});
  io("profile_enabled", s.profile_enabled, Any{});
  io("steps", s.steps, kSteps);
  io("resumed_at_step", s.resumed_at_step, kSteps);
  io("world", s.world, Int{.lo = 1, .hi = kMaxWorld});
  io("threads", s.threads, Int{.lo = 1, .hi = kMaxWorld});
  io("final_loss", s.final_loss, Num{.none = NoneAs::null});
  io("final_val_loss", s.final_val_loss, Num{.none = NoneAs::null});
  io("entropy_rate", s.entropy_rate, Num{.none = NoneAs::null});
  io("entropy_floor", s.entropy_floor, Num{.none = NoneAs::null});
  io("skipped_steps", s.skipped_steps, kSteps);
  io("optimizer_steps", s.optimizer_steps, kSteps);
  io("precision", s.precision, Any{});
  io("loss_scale_mode", s.loss_scale_mode, Any{});
  io("loss_scale_final", s.loss_scale_final, Num{});
  io("recompute", s.recompute, Any{});
  io("stopped_early", s.stopped_early, Any{.none = NoneAs::null});
  io("warmup_steps_excluded", s.warmup_steps_excluded, kSteps);
  io("step_ms_p50", s.step_ms_p50, kMs);
  io("step_ms_p90", s.step_ms_p90, kMs);
  io("tokens_per_s", s.tokens_per_s, Num{.decimals = 1});
  io("model_gflops", s.model_gflops, Num{.decimals = 3});
  io("peak_gflops", s.peak_gflops, Num{.decimals = 3});
  io("peak_gflops_end", s.peak_gflops_end, Num{.decimals = 3});
  io("mfu", s.mfu, Num{.decimals = 4});
  io("comm_exposed_frac", s.comm_exposed_frac, Num{.hi = 1, .decimals = 4});
  // 1 - exposed / in flight: below 0 when a rank waited longer than the collectives ran.
  io("overlap", s.overlap,
     Num{.lo = std::numeric_limits<double>::lowest(),
         .hi = 1,
         .decimals = 4,
         .none = NoneAs::null});
  io("activations_peak_bytes", s.activations_peak_bytes, Int{});
  io("checkpoints_saved", s.checkpoints_saved, kSteps);
  io("checkpoint_bytes", s.checkpoint_bytes, Int{});
  io("checkpoint_ms_p50", s.checkpoint_ms_p50, Num{.decimals = 3, .none = NoneAs::null});
  io("loop_wall_s", s.loop_wall_s, Num{.decimals = 6});
  io("tokens_per_s_wall", s.tokens_per_s_wall, Num{.decimals = 1});
  io("peak_rss_bytes", s.peak_rss_bytes, Int{.added_later = true});
  io("network", s.network, Any{.added_later = true});
  io("compress_choice", s.compress_choice, Any{.none = NoneAs::null, .added_later = true});
}

ojson to_json(const RunSummary& s) { return encode(s, Any{}); }
ojson to_json(const CompressChoice& c) { return encode(c, Any{}); }

std::string summary_text(const RunSummary& s) { return dump_json(to_json(s), 2) + "\n"; }

RunSummary summary_from_json(const json& j, const std::string& where) {
  RunSummary s;
  const bool legacy = j.is_object() && !j.contains("format_version");
  if (!legacy && j.is_object()) {
    const json& v = j["format_version"];
    if (v.is_number() && v.get<double>() > kSummaryFormat)
      throw InputError(where + ": format_version " + shown(v) +
                       " is newer than this ringstep reads (" + std::to_string(kSummaryFormat) +
                       "): report it with the ringstep that wrote it");
  }
  JsonReader in(j, JsonPlace{where, ""}, legacy);
  fields(in, s);
  if (legacy) {
    // Format 1 divided its MFU by the larger of two peaks; the one peak is the start's.
    s.format_version = 1;
    in.allow("peak_gflops_start");
    if (j.contains("peak_gflops_start")) {
      in("peak_gflops_start", s.peak_gflops, Num{});
      s.mfu = model_flops_utilization(s.model_gflops, s.peak_gflops);
    }
  }
  in.finish();
  return s;
}

std::vector<std::string> summary_field_names() {
  std::vector<std::string> names;
  RunSummary s;
  FieldNames lister{"", &names};
  fields(lister, s);
  return names;
}

}  // namespace ringstep
