// The synthetic data source: a seeded Markov chain over the vocabulary whose next token
// depends on the previous token and the low bit of the token before it (2V contexts).
// Each token has 4-8 likely successors, which its two contexts weight differently
// (Dirichlet(2) weights per context); a uniform part of weight kUniformMix keeps the chain
// irreducible and aperiodic. The stationary distribution and the entropies are computed
// exactly at construction; docs/data.md gives the formulas.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/data.h"

namespace ringstep {

// SplitMix64 (Steele, Lea, Flood 2014): one word of state; (seed, stream) picks the start.
class SplitMix64 {
 public:
  SplitMix64(uint64_t seed, uint64_t stream);
  uint64_t next();
  double uniform();            // in [0, 1)
  uint32_t below(uint32_t n);  // in [0, n)

 private:
  uint64_t state_;
};

// Immutable after construction; safe to share between threads.
class MarkovChain {
 public:
  // Tuned so configs/tiny.yaml's model learns the source in 300 steps (docs/data.md). A
  // model's excess loss from finite data grows with the outcomes per context it must
  // estimate (~ contexts x outcomes / 2 tokens): a small uniform part (kUniformMix) keeps
  // the chain ergodic without making every token a plausible successor; 3-8 successors per
  // token; the bit before the previous token moves a quarter of the weights.
  static constexpr double kUniformMix = 0.002;
  static constexpr int kMinSuccessors = 3;
  static constexpr int kMaxSuccessors = 8;
  static constexpr double kBitMix = 0.25;
  static constexpr double kStationaryTol = 1e-12;  // L1 change of one power iteration

  MarkovChain(int vocab_size, uint64_t seed);

  int vocab_size() const { return vocab_; }
  int num_states() const { return 2 * vocab_; }
  // State s = 2 * a + b: previous token a, low bit b of the token before it.
  static int next_state(int state, int token) { return 2 * token + ((state >> 1) & 1); }

  double prob(int state, int token) const;                           // P(token | state)
  const std::vector<double>& stationary() const { return pi_; }      // over states
  double entropy_rate() const { return entropy_rate_; }              // H = E_pi H(P(.|s))
  double first_step_entropy() const { return first_step_entropy_; }  // H(X1 | X0)
  // (H(X1|X0) + (T-1) H) / T: position 0 sees one token, every later one its full state.
  double window_floor(int seq_len) const;

  int sample_state(SplitMix64& rng) const;  // from the stationary distribution
  int sample_token(int state, SplitMix64& rng) const;

 private:
  void build_successors(uint64_t seed);
  void solve_stationary();
  void compute_entropies();

  // Context s = (a, b) has token a's num_succ_[a] distinct successors succ_[a*kMax + k],
  // weighted by q_[s*kMax + k].
  int num_successors(int state) const { return num_succ_[state >> 1]; }
  const int32_t* successors(int state) const {
    return &succ_[static_cast<size_t>(state >> 1) * kMaxSuccessors];
  }
  const double* weights(int state) const {
    return &q_[static_cast<size_t>(state) * kMaxSuccessors];
  }

  int vocab_;
  std::vector<int> num_succ_;
  std::vector<int32_t> succ_;
  std::vector<double> q_;
  std::vector<double> pi_;
  std::vector<double> pi_cdf_;
  double entropy_rate_ = 0;
  double first_step_entropy_ = 0;
};

// Train stream of rank r: generator stream 1000 + r; val: stream 7 on every rank.
std::unique_ptr<DataSource> make_synthetic_source(const Config& cfg, const std::string& split,
                                                  int rank, int world);

}  // namespace ringstep
