// Preemption (SIGTERM from a scheduler, SIGINT from Ctrl-C) for runs that save checkpoints:
// while a PreemptGuard lives, the first signal only sets a flag that the trainer reads at
// the end of each step (the ranks agree on it, then save a checkpoint and stop); a second
// signal exits at once with code 128 + its number. The previous handlers come back when the
// guard goes. One guard at a time per process.
#pragma once

namespace ringstep {

class PreemptGuard {
 public:
  PreemptGuard();
  ~PreemptGuard();
  PreemptGuard(const PreemptGuard&) = delete;
  PreemptGuard& operator=(const PreemptGuard&) = delete;
  // A signal has arrived since the guard was made.
  bool requested() const;
};

}  // namespace ringstep
