// 0/1 Adam (Lu et al. 2022, "Maximizing Communication Efficiency for Large-scale Training
// via 0/1 Adam", arXiv 2202.06009; DeepSpeed's ZeroOneAdam names the knobs), docs/optim.md
// gives the algorithm and where it differs from both.
//
// Steps s = 1, 2, ... (applied steps; a skipped step does not count). F = var_freeze_step.
// - The variance v is updated only at the steps of T_v (ZeroOneSchedule::updates_variance:
//   kappa = var_update_scaler steps at interval 1, then kappa at interval 2, 4, ...), never
//   after F. Such a step is AdamW's on gradients averaged in fp32 (stage warmup), except
//   that the gradient stands for each step since the last update (d of them):
//     v = b2^d v + (1 - b2^d) g^2, bias-corrected by 1 - b2^S (S = the last such step).
// - Every other step is local: each rank updates its momentum from its own gradient and
//   moves its own parameters; it accumulates what it moved in u:
//     m = b1 m + (1 - b1) g;  u = k u + lr m / (1 - b1^s);  D = k D;  L = L + lr
//     p = D a - u / (sqrt(v / (1 - b2^S)) + eps)
//   with k = 1 - lr wd on tensors the registry marks decay (1 elsewhere) and a the anchor,
//   the parameters at the last sync. So p is the decoupled-decay Adam step applied step by
//   step, written in closed form from (a, u, D).
// - At a sync, after that local update, u is averaged by the Reducer's sign_average (1 bit
//   per element, worker and server error feedback), and every rank sets
//     m = u (1 - b1^s) / L;  a = D a - u / (sqrt(v / (1 - b2^nv)) + eps);  p = a;
//     u = 0;  D = 1;  L = 0
//   Before F every non-T_v step syncs (stage compressed); after F syncs come at intervals
//   that double every local_step_scaler steps up to local_step_clipper (stage sync), with
//   local steps between them (stage local), and the run's last step always syncs.
// Where v is 0 (no gradient reached the coordinate in a variance update) m, u and both
// error buffers are held at 0 and there is no momentum step; decay still applies.
// Between syncs the ranks' parameters differ (replicas_agree() is false): a checkpoint
// saves the anchor (replicated) and each rank's m, u and error buffers, and restore_params
// rebuilds each rank's parameters from them bit for bit.
// CPU only (the config refuses cuda). Not thread-safe; one instance per rank.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/registry.h"
#include "optim/adamw.h"
#include "optim/optimizer.h"
#include "optim/reducer.h"

namespace ringstep {

struct ZeroOneParams {
  int var_freeze_step = 120;   // F: the last step that may update v; >= 1
  int var_update_scaler = 8;   // kappa: v updates at one interval before it doubles; >= 1
  int local_step_scaler = 32;  // steps after F at one sync interval before it doubles; >= 1
  int local_step_clipper = 2;  // H: the longest sync interval; >= 1
  int last_step = 0;           // the run's last step, always a sync (0: none)
  SignCode code;               // of the sync's sign_average
};

// The schedules as functions of the (1-based) step, so that nothing of them is state.
struct ZeroOneSchedule {
  ZeroOneParams p;
  // s is in T_v: s <= F and, in the group g that holds s (the steps after kappa (2^g - 1)
  // up to kappa (2^(g+1) - 1)), s - kappa (2^g - 1) is a multiple of 2^g.
  bool updates_variance(int64_t s) const;
  // After F: frozen step f = s - F lies in group g = (f - 1) / local_step_scaler, whose
  // interval is I = min(2^g, H); s syncs where (f - g local_step_scaler) is a multiple of
  // I, at the group's last step, and at last_step. Before F every step syncs.
  bool syncs(int64_t s) const;
  // The stage of step S on WORLD ranks: warmup (a T_v step, or one rank: nothing to
  // compress, plain Adam), compressed (before F), sync or local (after F).
  OneBitStage stage(int64_t s, int world) const;
};

// The knobs of CFG's optimizer.zero_one and sign code, its train.steps the last step.
ZeroOneParams zero_one_params(const Config& cfg);

class ZeroOneAdam final : public Optimizer {
 public:
  ZeroOneAdam(const Registry& reg, const AdamWParams& hp, const ZeroOneParams& zo);

  // Optimizer. Stage of the next step: the schedule's (ZeroOneSchedule::stage).
  bool wants_allreduce(int world) const override { return *stage(world) == OneBitStage::warmup; }
  std::optional<OneBitStage> stage(int world) const override;
  bool begin_under_backward(const float*, double, Reducer&) override { return false; }
  SignExchange step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale,
                    Reducer& reducer) override;
  // Nothing is in flight before step(): the state is untouched.
  SignExchange skip(Reducer&) override { return {}; }
  int64_t step_count() const override { return t_; }
  void set_step_count(int64_t t) override { t_ = t; }
  // "adam_v", "zero_one_anchor", "zero_one_scalars" (D, L, S) replicated; "zero_one" per rank:
  // m, u, the worker error, the server error.
  std::vector<StateTensor> state_tensors() override;
  // Averages m and u over the saved ranks (a sync without the code: the new ranks'
  // parameters are the old ranks' mean step from the anchor) and keeps the error feedback's
  // mean_r e_w + e_s as 1-bit Adam does (OneBitAdam::adopt_world_change).
  void adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved, int saved_world,
                          int world) override;
  bool replicas_agree() const override;
  // PARAMS = D a - u / denominator, as the last local step computed them.
  void restore_params(FlatBuffer& params) override;
  size_t state_bytes() const override;

  const ZeroOneSchedule& schedule() const { return sched_; }
  FlatBuffer& m() { return m_; }
  FlatBuffer& v() { return v_; }
  FlatBuffer& u() { return u_; }
  FlatBuffer& anchor() { return a_; }
  FlatBuffer& worker_error() { return ew_; }
  FlatBuffer& server_error() { return es_; }

 private:
  // A T_v step on averaged GRADS times GRAD_SCALE (see above).
  void variance_step(float* params, const float* grads, double lr, float grad_scale);
  // The local update of m, u, D and L; with SYNC, then the exchange and the sync.
  SignExchange local_step(float* params, const float* grads, double lr, float grad_scale, bool sync,
                          Reducer& reducer);
  // The sync of elements [begin, end) once u holds its mean there.
  void apply_sync(float* params, size_t begin, size_t end);
  // params = D a - u / denominator over one tensor's [begin, end) (DT: D there).
  void set_local_params(float* params, size_t begin, size_t end, float dt) const;
  // 1 / sqrt(1 - b2^S).
  float inv_sqrt_c2() const;

  const Registry& reg_;
  AdamWParams hp_;
  ZeroOneSchedule sched_;
  FlatBuffer m_, v_, u_, a_, ew_, es_;
  FlatBuffer scalars_;  // [D, L, S: the step of the last variance update]
  int64_t t_ = 0;
};

// What a 0/1 Adam config on WORLD ranks will not do as asked, in one line (one rank:
// plain Adam; var_freeze_step >= train.steps: no local steps); "" otherwise.
std::string zero_one_warning(const Config& cfg, int world);

}  // namespace ringstep
