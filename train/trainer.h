// The training loop: gradient accumulation over micro-batches, gradient reduction across
// ranks, loss scaling, clipping, AdamW and the LR schedule, evaluation on the held-out
// stream. A Trainer owns the model, the gradient sync and a TrainState (everything a resume
// needs besides the parameters); train/run_log.h prints and writes what a run reports.
// Everything that can be checked is checked in the constructor, before the run directory is
// created, so a bad config or data file leaves nothing half-written.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/config.h"
#include "core/profiler.h"
#include "core/trace.h"
#include "models/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/data.h"
#include "train/deferred_steps.h"
#include "train/grad_sync.h"
#include "train/run_dir.h"
#include "train/run_log.h"

namespace ringstep {

class Communicator;
class DeviceComm;

struct TrainOutcome {
  std::vector<float> losses;        // training loss of each logged step
  std::vector<double> loss_scales;  // the loss scale each step ran with
  int skipped_steps = 0;            // steps skipped for inf/NaN gradients
  int64_t optimizer_steps = 0;      // steps applied (Adam's step count)
  float final_val_loss = 0;
  uint64_t params_fnv1a64 = 0;  // fnv1a64 of the final parameter buffer's bytes
  double params_l2 = 0;         // the L2 norm of the final parameters, in double
  int resumed_step = 0;         // the checkpoint's step it resumed from; 0 = a fresh start
  std::string last_checkpoint;  // path of the last checkpoint this run saved, if any
  bool preempted = false;       // stopped by SIGTERM/SIGINT after saving (train/preempt.h)
};

// The run stopped itself (max_consecutive_skips overflowing steps in a row); the message
// says what happened and what to try. The run directory holds every step up to there.
struct TrainingStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Everything a resume needs besides the model's parameters: a checkpoint is this state plus
// model.params(), and nothing else. The data stream's position is data->position(); the
// weights' initialisation and every data stream derive from the config's seed.
struct TrainState {
  // The optimizer state lives on cfg.run.device, with the parameters.
  TrainState(const Registry& params, const Config& cfg, std::unique_ptr<DataSource> train_data);

  int step = 0;                          // optimizer steps done, applied or skipped
  LossScaler scaler;                     // scale, hysteresis and skip counters
  std::unique_ptr<Optimizer> optimizer;  // optimizer.name's (optim/optimizer.h): its state
                                         // and step count (applied steps only)
  double last_grad_norm = NAN;           // of the last applied step (NaN: none yet); an exchange
                                         // begun under backward clips by it
  std::unique_ptr<DataSource> data;      // this rank's training stream
};

class Trainer {
 public:
  // Checks CFG against the world size, reads the data and, per checkpoint.resume, loads a
  // checkpoint (train/checkpoint.h); COMM may be null (one rank). Throws InputError for bad
  // input (a run directory holding an earlier run that is not resumed included), before
  // anything is written. DEVICE_COMM (comm.backend: nccl; not owned) reduces the gradient
  // buckets on the device (GradSync's device path).
  Trainer(const Config& cfg, Communicator* comm, DeviceComm* device_comm = nullptr);
  ~Trainer();

  // Runs the remaining steps (saving a checkpoint every checkpoint.every steps and at the
  // end), evaluates, writes summary.json. Throws TrainingStopped when the loss scaler gave
  // up, or on an inf/NaN without loss scaling (train.on_nan: stop). With checkpoint.every > 0,
  // SIGTERM or SIGINT on any rank saves a checkpoint after the current step and returns at once
  // (preempted; no evaluation, no summary). A SystemFault (core/error.h) mid-run ends it
  // after the summary of the steps that ran is written (or printed, if it cannot be).
  TrainOutcome run();

 private:
  RunEnd run_end(const TrainOutcome& out, std::string stop_reason) const;
  [[noreturn]] void end_on_fault(const SystemFault& fault, const TrainOutcome& out);
  // What one step did, on this rank, before the ranks agree on it.
  struct StepResult {
    double loss = 0;  // mean over the micro-batches
    double lr = 0;
    double grad_norm = 0;   // NaN when skipped
    double loss_scale = 1;  // the scale backward ran with
    bool applied = false;
    std::optional<OneBitStage> stage;  // compressed optimizers only
    SignExchange exchange;             // the optimizer's own exchange, if it ran
    GradSync::Result comm;
    PhaseTimes times;
    OpProfile ops;  // filled on op-timed steps (profile.op_every, traced steps)
  };
  void init_from(const std::string& path, bool lead);
  StepResult step();
  // DECIDED: the step's record where the runtime decides it (then the loss is added there
  // and 0 returned).
  double micro_batch(int micro, bool traced, bool hook, DeferredStep* decided);
  int unscale_and_agree(bool traced, double loss);
  // The check, norm, decision and update of a step the runtime decides, queued there.
  void queue_deferred_update(bool traced, DeferredStep* decided);
  // The unlogged steps' results from what the runtime decided (train/deferred_steps.h); the
  // host's mirrors refreshed; the steps after one that ended the run dropped.
  void read_deferred();
  std::string trace_path() const;  // this rank's Chrome trace
  // Whether an inf/NaN ends the run (no loss scaling to absorb it, train.on_nan: stop).
  bool bad_step_stops() const;
  std::string numerical_fault(int step, int rank) const;
  double apply_update(double lr, bool traced, bool averaged, SignExchange& exchange);
  double previous_clip_coefficient() const;
  double timed_update(double lr, bool traced, bool averaged, SignExchange& exchange);
  // Times F as phase FIELD (and, in the trace window, as span NAME); returns what F returns.
  template <class F>
  auto timed(double PhaseTimes::*field, const char* name, bool traced, F&& f);
  // Times the ops of PHASE into the step's profile while the scope lives (nothing on a
  // step without op timing).
  OpPhaseScope op_scope(OpPhase phase, bool traced);
  void trace_comm(const GradSync::Result& comm, int64_t wait_start);  // wait_start 0: no wait
  // Queues the step just run for its record; logs every queued step at once unless the
  // timer waits for device times, which are read once per log interval (core/profiler.h).
  void log_step(const StepResult& s, TrainOutcome& out);
  // Logs every queued step (reading their device times first, if any).
  void flush_log(TrainOutcome& out);
  // Agrees on step N across ranks and, on rank 0, writes its record and (every log_every
  // steps) its line. VAL_LOSS: the evaluation after it, NaN if none.
  void log_record(const StepResult& s, int n, float val_loss, TrainOutcome& out);
  float evaluate();
  void save(TrainOutcome& out);
  TrainOutcome stop_preempted(TrainOutcome& out);
  void record_end_state(TrainOutcome& out) const;
  // Every rank's network facts, this rank's end snapshot read now; collective.
  std::vector<NetFacts> network_at_end();

  const Config cfg_;
  GradSync sync_;
  RunFacts facts_;
  std::unique_ptr<DataSource> val_data_;
  Gpt model_;
  Arena arena_;  // on the model's device
  TrainState state_;
  LrSchedule schedule_;
  StepTimer timer_;
  TraceRecorder trace_;
  RunDir run_dir_;
  RunTotals totals_;
  SteadyClock::time_point loop_start_;  // run()'s loop began (elapsed and ETA)
  StragglerLog stragglers_;
  std::vector<int32_t> inputs_, targets_;  // [grad_accum_steps, micro_batch, seq_len]
  float last_val_loss_;
  std::string resumed_from_;  // the checkpoint loaded at construction; "" = none
  std::string fault_;         // why a numerical fault stops the run; "" = none
  OpProfile* ops_ = nullptr;  // the current step's op profile on op-timed steps
  struct Unlogged {
    StepResult s;
    int step;
    float val_loss;
  };
  std::vector<Unlogged> unlogged_;  // steps run whose records wait for their device times
  // One rank with an optimizer that allows it: the steps the runtime decides (null: the host
  // decides each step).
  std::unique_ptr<DeferredSteps> deferred_;
};

// Runs CFG to completion: Trainer(cfg, comm, device_comm).run().
TrainOutcome train(const Config& cfg, Communicator* comm, DeviceComm* device_comm = nullptr);

}  // namespace ringstep
