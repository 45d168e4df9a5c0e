#include "train/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/error.h"

namespace ringstep {
namespace {

constexpr uint64_t kChainStream = 1;  // generator stream that draws the chain itself
constexpr uint64_t kValStream = 7;
constexpr uint64_t kTrainStreamBase = 1000;
constexpr int kMaxPowerIterations = 1000000;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double xlogx(double p) { return p > 0 ? p * std::log(p) : 0.0; }

// Entropy of P(x) = u + (1-eps) * mass[k] on the distinct tokens of MASS, u = eps/V elsewhere.
double mixed_entropy(const std::vector<double>& mass, int vocab) {
  const double eps = MarkovChain::kUniformMix;
  const double u = eps / vocab;
  double h = -(vocab - static_cast<double>(mass.size())) * xlogx(u);
  for (double m : mass) h -= xlogx(u + (1 - eps) * m);
  return h;
}

}  // namespace

SplitMix64::SplitMix64(uint64_t seed, uint64_t stream)
    : state_(mix64(seed + 0x9E3779B97F4A7C15ull) ^ mix64(stream * 0xD1B54A32D192ED03ull + 1)) {}

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix64(state_);
}

double SplitMix64::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint32_t SplitMix64::below(uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
}

MarkovChain::MarkovChain(int vocab_size, uint64_t seed) : vocab_(vocab_size) {
  if (vocab_size < 2) throw InputError("synthetic data needs model.vocab_size >= 2");
  build_successors(seed);
  solve_stationary();
  compute_entropies();
}

void MarkovChain::build_successors(uint64_t seed) {
  SplitMix64 rng(seed, kChainStream);
  num_succ_.assign(vocab_, 0);
  succ_.assign(static_cast<size_t>(vocab_) * kMaxSuccessors, 0);
  q_.assign(static_cast<size_t>(num_states()) * kMaxSuccessors, 0.0);
  for (int a = 0; a < vocab_; ++a) {
    const int n = std::min(
        vocab_, kMinSuccessors + static_cast<int>(rng.below(kMaxSuccessors - kMinSuccessors + 1)));
    int32_t* succ = &succ_[static_cast<size_t>(a) * kMaxSuccessors];
    for (int k = 0; k < n; ++k) {
      do succ[k] = static_cast<int32_t>(rng.below(vocab_));
      while (std::find(succ, succ + k, succ[k]) != succ + k);
    }
    num_succ_[a] = n;
    // Gamma(2) = -log(u1 u2), so normalised draws are Dirichlet(2, ..., 2). Each context's
    // weights: (1 - kBitMix) * the token's shared draw + kBitMix * the context's own draw.
    auto dirichlet = [&](double* w) {
      double total = 0;
      for (int k = 0; k < n; ++k)
        total += w[k] = -std::log((1.0 - rng.uniform()) * (1.0 - rng.uniform()));
      for (int k = 0; k < n; ++k) w[k] /= total;
    };
    double shared[kMaxSuccessors], own[kMaxSuccessors];
    dirichlet(shared);
    for (int s = 2 * a; s <= 2 * a + 1; ++s) {
      dirichlet(own);
      double* q = &q_[static_cast<size_t>(s) * kMaxSuccessors];
      for (int k = 0; k < n; ++k) q[k] = (1 - kBitMix) * shared[k] + kBitMix * own[k];
    }
  }
}

double MarkovChain::prob(int state, int token) const {
  const int32_t* succ = successors(state);
  double p = kUniformMix / vocab_;
  for (int k = 0; k < num_successors(state); ++k)
    if (succ[k] == token) p += (1 - kUniformMix) * weights(state)[k];
  return p;
}

// Power iteration pi <- pi P. State s = (a, b) moves on token x to (x, a & 1), so the
// uniform part of P sends the mass of all states with a & 1 == c evenly to (x, c).
void MarkovChain::solve_stationary() {
  const int S = num_states();
  std::vector<double> pi(S, 1.0 / S), next(S);
  for (int it = 0; it < kMaxPowerIterations; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    double mass[2] = {0, 0};
    for (int s = 0; s < S; ++s) {
      const int c = (s >> 1) & 1;
      mass[c] += pi[s];
      for (int k = 0; k < num_successors(s); ++k)
        next[2 * successors(s)[k] + c] += (1 - kUniformMix) * pi[s] * weights(s)[k];
    }
    double total = 0;
    for (int s = 0; s < S; ++s) total += (next[s] += kUniformMix / vocab_ * mass[s & 1]);
    double change = 0;
    for (int s = 0; s < S; ++s) {
      next[s] /= total;
      change += std::fabs(next[s] - pi[s]);
    }
    pi.swap(next);
    if (change < kStationaryTol) {
      pi_ = std::move(pi);
      pi_cdf_.resize(S);
      double acc = 0;
      for (int s = 0; s < S; ++s) pi_cdf_[s] = (acc += pi_[s]);
      return;
    }
  }
  throw std::runtime_error("MarkovChain: power iteration did not converge");
}

// H = sum_s pi(s) H(P(.|s)). H(X1|X0) = sum_a m(a) H(R_a) with m(a) = pi(a,0) + pi(a,1)
// and R_a = sum_b pi(a,b)/m(a) P(.|a,b): one token does not reveal the bit before it.
// Both contexts of token a share its successors, so R_a mixes the two weight vectors.
void MarkovChain::compute_entropies() {
  entropy_rate_ = 0;
  first_step_entropy_ = 0;
  std::vector<double> mass;
  for (int a = 0; a < vocab_; ++a) {
    const int s0 = 2 * a, s1 = 2 * a + 1, n = num_successors(s0);
    const double m = pi_[s0] + pi_[s1];
    for (int s : {s0, s1}) {
      mass.assign(weights(s), weights(s) + n);
      entropy_rate_ += pi_[s] * mixed_entropy(mass, vocab_);
    }
    if (m <= 0) continue;
    for (int k = 0; k < n; ++k) mass[k] = (pi_[s0] * weights(s0)[k] + pi_[s1] * weights(s1)[k]) / m;
    first_step_entropy_ += m * mixed_entropy(mass, vocab_);
  }
}

double MarkovChain::window_floor(int seq_len) const {
  return (first_step_entropy_ + (seq_len - 1) * entropy_rate_) / seq_len;
}

int MarkovChain::sample_state(SplitMix64& rng) const {
  const double u = rng.uniform() * pi_cdf_.back();
  const auto it = std::upper_bound(pi_cdf_.begin(), pi_cdf_.end(), u);
  return static_cast<int>(std::min<ptrdiff_t>(it - pi_cdf_.begin(), num_states() - 1));
}

int MarkovChain::sample_token(int state, SplitMix64& rng) const {
  const double u = rng.uniform();
  if (u < kUniformMix) return static_cast<int>(rng.below(vocab_));
  double v = (u - kUniformMix) / (1 - kUniformMix);
  const int32_t* succ = successors(state);
  const double* q = weights(state);
  const int n = num_successors(state);
  for (int k = 0; k < n - 1; ++k) {
    if (v < q[k]) return succ[k];
    v -= q[k];
  }
  return succ[n - 1];
}

namespace {

// One stream of the chain, cut into consecutive windows of T+1 tokens.
class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(std::shared_ptr<const MarkovChain> chain, uint64_t seed, uint64_t stream,
                  std::string description)
      : chain_(std::move(chain)),
        seed_(seed),
        stream_(stream),
        rng_(seed, stream),
        description_(std::move(description)) {
    reset();
  }

  void reset() override {
    rng_ = SplitMix64(seed_, stream_);
    state_ = chain_->sample_state(rng_);
    drawn_ = 0;
  }

  void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
    for (int i = 0; i < B; ++i) {
      for (int t = 0; t <= T; ++t) {
        const int token = state_ >> 1;  // the newest token of the stream
        if (t < T) inputs[static_cast<size_t>(i) * T + t] = token;
        if (t > 0) targets[static_cast<size_t>(i) * T + t - 1] = token;
        advance();
      }
    }
  }

  uint64_t position() const override { return drawn_; }
  // Replays the chain: drawing a token costs nanoseconds, so a resume after millions of
  // tokens takes milliseconds and needs no saved generator state.
  void seek(uint64_t position) override {
    reset();
    while (drawn_ < position) advance();
  }

  std::string describe() const override { return description_; }

 private:
  std::shared_ptr<const MarkovChain> chain_;
  uint64_t seed_, stream_;
  void advance() {
    state_ = MarkovChain::next_state(state_, chain_->sample_token(state_, rng_));
    ++drawn_;
  }

  SplitMix64 rng_;
  int state_ = 0;
  uint64_t drawn_ = 0;  // tokens drawn since reset()
  std::string description_;
};

}  // namespace

std::unique_ptr<DataSource> make_synthetic_source(const Config& cfg, const std::string& split,
                                                  int rank, int world) {
  auto chain = std::make_shared<const MarkovChain>(cfg.model.vocab_size, cfg.run.seed);
  const uint64_t stream = split == "val" ? kValStream : kTrainStreamBase + rank;
  char line[256];
  std::snprintf(line, sizeof line,
                "synthetic Markov source: vocab %d, %d contexts (previous token, low bit of the "
                "one before), seed %llu; %s stream %llu (rank %d of %d)",
                chain->vocab_size(), chain->num_states(),
                static_cast<unsigned long long>(cfg.run.seed), split.c_str(),
                static_cast<unsigned long long>(stream), rank, world);
  return std::make_unique<SyntheticSource>(std::move(chain), cfg.run.seed, stream, line);
}

}  // namespace ringstep
