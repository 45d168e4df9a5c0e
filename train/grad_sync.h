// Gradient synchronisation for data parallelism, DDP style: the gradient buffer is cut into
// buckets of about comm.bucket_mb, made of the model's units (GptSpec::bucket_units: half
// blocks, in the order backward finishes them); on the last micro-batch each bucket's
// AllReduce is enqueued on the comm engine as soon as backward has finished its units, so
// it runs while earlier layers are still computing. finish() waits for all of them;
// gradients come back averaged over ranks.
// Also the small per-step agreements the trainer needs: mean loss, every rank's phase
// times for the `ranks` block, the loss scaler's skip flag and the replica checksum; and
// the Reducer an optimizer is handed (optim/reducer.h), whose sign_average runs 1-bit Adam's
// compressed exchange bucket by bucket (comm/sign_allreduce.h). With one rank every call is
// local and costs nothing. Used by the training thread only.
//
// Gradients on a GPU (Device::cuda) are staged through pinned host memory bucket by bucket:
// each bucket is copied out on a side stream behind the backward that wrote it, reduced in
// host memory by the engine, and copied back, while backward goes on with the layers below
// (comm.overlap; without it, the buckets are staged one after another once backward ends).
// The copies are inside the bucket's comm span. 1-bit Adam's buckets on a GPU start when
// backward ends.
//
// With a DeviceComm (comm.backend: nccl, comm/device_comm.h) the gradients never leave the
// device: each bucket is reduced on the device's comm stream behind the backward kernels
// that wrote it, finish() makes the compute stream wait for the comm stream and returns
// without waiting, and settle() reads the step's comm and exposed comm from the device's
// marks once the step's work is queued. This path runs with one rank too (one NCCL rank).
// sign_average on it queues each bucket's compressed exchange on the comm stream
// (comm/device_sign_allreduce.h) with the DeviceComm's kernels, on the device's buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/engine.h"
#include "comm/sign_allreduce.h"
#include "core/config.h"
#include "core/intervals.h"
#include "core/profiler.h"
#include "core/registry.h"
#include "optim/reducer.h"
#include "train/step_record.h"

namespace ringstep {

class Communicator;
class CommEngine;
class DeviceComm;
class DeviceSignAllreduce;
class Gpt;
class GptSpec;

struct Bucket {
  size_t begin = 0, end = 0;          // element range of the flat gradient buffer
  int first_unit = 0, last_unit = 0;  // units (in backward order) it holds
  std::vector<size_t> tensor_ends;    // relative to begin: where each tensor's part ends
                                      // (padding goes with the tensor before it)
};

// Buckets over units given in backward order, each a contiguous range adjacent to the
// previous one; consecutive units are merged until a bucket holds >= bucket_bytes.
std::vector<Bucket> make_buckets(const std::vector<std::pair<size_t, size_t>>& units,
                                 size_t bucket_bytes);
// Fills each bucket's tensor_ends from the tensors' first elements (TENSOR_STARTS, any order).
void cut_at_tensors(std::vector<Bucket>& buckets, std::vector<size_t> tensor_starts);

class GradSync final : public Reducer {
 public:
  // Engine tags (CollectiveDesc::tag) of GradSync's collectives; the engine checks on a
  // tag's first use that every rank agrees on the collective. Bucket b's AllReduce is tag
  // b, so bucket tags are 0 .. buckets().size() - 1 (the trace's "bucket b"); the
  // bookkeeping collectives have the fixed tags below, far above any bucket count.
  enum Tag : uint64_t {
    kStepViewTag = uint64_t{1} << 20,  // agree()
    kGatherTag,                        // gather(), gather_bytes(), check_replicas()
    kAnyRankTag,                       // any_rank(), first_rank()
    kAverageTag,                       // average()
  };
  // sign_average() runs bucket b as op "sign_allreduce" with tag b (its own (op, tag) pairs).

  // A step's communication. A collective is in flight from the moment it is handed to the
  // engine (queued) until the engine has finished it; exposed is the part of the training
  // thread's waits during which one was in flight (core/intervals.h), so exposed <= comm
  // always. The rest of a wait (the waiter's wake-up after the last one ends) is `other`.
  struct Result {
    double comm_ms = 0;           // time collectives were in flight (union of their spans)
    double exposed_ms = 0;        // time the training thread waited while one was in flight
    size_t bytes = 0;             // payload bytes reduced this step on this rank
    size_t sent_bytes = 0;        // bytes this rank put on the links: 2(N-1)/N x bytes for an
                                  // fp32 AllReduce (the ring's volume), exact for sign_average
    std::vector<CommSpan> spans;  // the step's gradient collectives, for the trace
  };
  // What every rank learns about a step from every rank.
  struct StepView {
    float mean_loss = 0;
    PhaseTimes slowest;  // the phases of the slowest rank
    RanksBlock ranks;
    double straggler_ratio = 0;  // ranks.straggler's busy time over the median, if any
    // sqrt(sum of ranks' ||z - s sign z||^2 / sum of ||z||^2); NaN when nothing was compressed.
    double compression_error = 0;
  };

  // COMPUTE_THREADS: the rank's (run.threads resolved). The engine thread sleeps while it
  // waits (WaitPolicy::sleeping()) where they leave no core to spare (rank_has_spare_core),
  // else waits politely.
  // DEVICE_COMM (not owned; null: the host path) reduces the gradient buckets on the device;
  // COMM still carries the bookkeeping collectives.
  GradSync(Communicator* comm, const CommConfig& cfg, int compute_threads = 1,
           DeviceComm* device_comm = nullptr);
  ~GradSync() override;
  int rank() const { return rank_; }
  int world() const override { return world_; }
  // Cuts MODEL's gradient buffer into buckets; with more than one rank and gradients on a
  // GPU, allocates their pinned host staging copy (with a DeviceComm instead, has it
  // reserve its scratch for the buckets). Each bucket is then staged on its own:
  // copied out as backward finishes it, reduced, copied back (Runtime::copy_to_host_async).
  void setup(Gpt& model);
  // The same for GRADS laid out by SPEC (what setup(Gpt&) passes; a test's own buffer).
  void setup(FlatBuffer& grads, const GptSpec& spec);
  // The per-unit hook to pass to Gpt::backward on the last micro-batch: null with one
  // rank or when comm.overlap is false.
  std::function<void(int)> unit_hook();
  // Host path: waits for every bucket; gradients come back averaged over ranks. Device
  // path: queues the buckets not yet queued and the compute stream's wait for them, polls
  // for asynchronous errors, and returns bytes and sent_bytes only (settle() adds the times).
  Result finish();
  // Device path: R's comm_ms, exposed_ms and spans from the device's marks of the step
  // (DeviceComm::read_times: waits until the device has reached them) and returns true;
  // elsewhere leaves R as it is and returns false.
  bool settle(Result& r);
  // Every rank's loss, phases and (1-bit Adam) compression error sums → what every rank learns.
  StepView agree(float loss, const PhaseTimes& local, const SignExchange& exchange = {});
  // Reducer: blocking collectives on the engine, outside the bucket accounting (their time
  // is the caller's phase, not finish()'s comm_ms). any_rank is first_rank() >= 0
  // (the loss scaler's inf/NaN agreement); average runs the configured comm.allreduce
  // algorithm.
  bool any_rank(bool flag) override;
  // The lowest rank whose FLAG is true (an AllReduce MIN), or -1: who saw a fault first.
  int first_rank(bool flag);
  void average(float* buf, size_t n) override;
  // Reducer: one sign_allreduce per bucket (a part, in the Reducer's sense), pipelined: this
  // thread prepares and encodes each bucket and queues its exchange on the engine, then
  // waits for each in turn, decodes it and finishes it. Between begin and finish, the unit
  // hook starts each bucket as backward finishes it (1-bit Adam's exchange under backward).
  // The segments are the registry's tensors cut into CODE.block blocks (split_segments).
  // With a DeviceComm, each bucket's exchange is a DeviceSignAllreduce queued on the comm
  // stream instead (the device's buffers, its kernels; no INPUT: BUF is read), decoded
  // there by finish_sign_average, which then makes the compute stream wait and runs every
  // FINISH part without waiting itself; SignExchange's worker_sq_* are 0 there, and
  // measure_sign_code measures nothing.
  // The exchanges' spans and the waits are the step's communication: collect them with
  // take_exchange().
  bool takes_input() const override { return !device_comm_; }
  void begin_sign_average(float* buf, float* worker_error, float* server_error, size_t n,
                          const SignCode& code, Part prepare, Input input = {}) override;
  SignExchange finish_sign_average(const Part& finish) override;
  // Reducer: finish()'s last measurement; one encode and decode of every bucket.
  ExchangeCost last_gradient_exchange() const override { return last_gradient_; }
  SignCost measure_sign_code(const float* buf, size_t n, const SignCode& code) override;
  // Between begin and finish: starts the buckets the unit hook has not, and waits for every
  // bucket, timed as the exchange's wait, so that the bookkeeping collectives queued next do
  // not wait behind them.
  void wait_sign_sent();
  // The communication of the sign_average calls since the last take_exchange(): comm_ms
  // from their spans, exposed_ms the time the training thread waited for them.
  Result take_exchange();
  // VALUE of every rank, in rank order (an allgather); every rank must call it.
  std::vector<uint64_t> gather(uint64_t value);
  // Rank r's BYTES_PER_RANK bytes at BUF + r x BYTES_PER_RANK, in and out (an allgather of
  // small records); every rank must call it with the same size.
  void gather_bytes(void* buf, size_t bytes_per_rank);
  // Compares a checksum of every rank's parameters (read through the staging copy when they
  // are on a GPU); throws CommError naming the ranks whose parameters differ from rank 0's
  // (replicas diverged: a bug or a bad reduction).
  void check_replicas(const FlatBuffer& params, int step);
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void enqueue_bucket(size_t b);
  Result finish_on_device();
  // One SignAllreduce per bucket for CODE (kept while the code stays the same).
  void set_sign_code(const SignCode& code);
  void start_sign_bucket(size_t b);
  SignExchange finish_sign_on_device(const Part& finish);
  // Fills VIEW's busy-time fields and straggler from every rank's busy time (kStraggler*).
  void find_straggler(const std::vector<double>& busy, StepView& view);
  void wait_bookkeeping(const CommHandle& handle);  // waits, and drops its span
  // Runs F (a wait for step communication) as one of the step's waits.
  template <class F>
  void waiting(F&& f);
  // The engine's spans and the waits since the last collect.
  Result collect_spans();

  Communicator* comm_;
  DeviceComm* device_comm_ = nullptr;
  CommConfig cfg_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<CommEngine> engine_;
  float* grads_ = nullptr;              // what the buckets reduce: the gradients or staging_
  FlatBuffer* device_grads_ = nullptr;  // the model's gradients when they are staged
  FlatBuffer staging_;                  // host copy of device gradients (or parameters)
  std::unique_ptr<void, std::function<void(void*)>> pinned_;  // staging_ page-locked
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::vector<CommSpan> kept_spans_;       // bucket spans drained by a bookkeeping wait
  std::vector<int> straggler_streak_;      // consecutive steps each rank was over the ratio
  std::vector<SignAllreduce> sign_calls_;  // per bucket, for sign_code_ (host path)
  std::vector<std::unique_ptr<DeviceSignAllreduce>> device_sign_calls_;  // (device path)
  SignCode sign_code_;
  struct SignRun {  // the sign_average between begin and finish
    float* buf = nullptr;
    float* worker_error = nullptr;
    float* server_error = nullptr;
    size_t n = 0;
    Part prepare;
    Input input;
    SignExchange total;
    bool active = false;
  } sign_;
  std::vector<Interval> waits_;  // the training thread's waits since the last collect
  size_t exchange_sent_bytes_ = 0;
  ExchangeCost last_gradient_;
};

}  // namespace ringstep
