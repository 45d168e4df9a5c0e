// Gradient synchronisation for data parallelism, DDP style: the gradient buffer is cut into
// buckets of comm.bucket_mb in reverse layer order; on the last micro-batch each bucket's
// AllReduce is enqueued on the comm engine as soon as backward has finished its layers,
// and finish() waits for all of them and averages. With one rank (or no communicator)
// every call is a no-op that costs nothing. Also the small per-step agreements the trainer
// needs (mean loss, max step time, the ranks block of the step record).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

namespace ringstep {

class Communicator;
class Gpt;

class GradSync {
 public:
  struct Result {
    double comm_ms = 0;     // time collectives were in flight
    double exposed_ms = 0;  // time the training thread waited on them
    size_t bytes = 0;       // payload bytes reduced this step
  };

  explicit GradSync(Communicator* comm);
  ~GradSync();
  int rank() const;
  int world() const;
  void setup(Gpt& model);
  // The per-layer hook to pass to Gpt::backward on the last micro-batch (null when the
  // reduction is not overlapped).
  std::function<void(int)> layer_hook();
  Result finish(Gpt& model);
  float mean_across_ranks(float x);
  double max_across_ranks(double x);
  nlohmann::ordered_json rank_stats(double step_ms);

 private:
  struct Impl;
  Communicator* comm_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringstep
