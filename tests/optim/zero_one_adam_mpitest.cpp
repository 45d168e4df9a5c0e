// 0/1 Adam on 2, 3 and 4 ranks against a single-process simulation of the same ranks: each
// MPI rank runs ZeroOneAdam with a Reducer over the real sign transport
// (comm/sign_allreduce.h) and, in the same process, N ZeroOneAdam instances on threads whose
// Reducer is the plain-loop simulation of the sign code (comm/sign_allreduce_reference.h).
// Through every stage (variance steps, 1-bit syncs before the freeze, syncs and local steps
// after it) the parameters, m, u and both error buffers match the simulated rank's bit for
// bit, step by step; the ranks' parameters agree exactly wherever replicas_agree() says so,
// and differ on local steps.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/sign_allreduce.h"
#include "comm/sign_allreduce_reference.h"
#include "core/checksum.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "optim/zero_one_adam.h"

namespace ringstep {
namespace {

using testing::world;

// Tensors with and without decay, padding between them (the registry aligns offsets), and
// embedding rows that never get a gradient (v stays 0 there).
Registry make_registry() {
  Registry reg;
  reg.add("w", {7, 13});
  reg.add("b", {13}, false);
  reg.add("emb", {20, 6});
  reg.add("ln", {29}, false);
  return reg;
}

std::vector<size_t> segment_ends(const Registry& reg, size_t block) {
  std::vector<size_t> ends;
  for (const TensorInfo& t : reg.tensors()) ends.push_back(t.offset + t.numel);
  if (ends.back() != reg.total_numel()) ends.push_back(reg.total_numel());
  return split_segments(ends, reg.total_numel(), block);
}

// Rank Q's gradient at step S from its own parameters: a pull towards 0 and noise that
// differs per rank; the first three embedding rows get none.
void gradient(const Registry& reg, int q, int s, const float* params, float* g) {
  const TensorInfo& emb = reg.find("emb");
  for (size_t i = 0; i < reg.total_numel(); ++i) {
    const uint32_t h = uint32_t(i * 2654435761u) ^ uint32_t(q * 40503 + s * 977);
    const float noise = float(int(h % 2001) - 1000) / 1000.0f;
    g[i] = 0.05f * params[i] + noise * (1.0f + 0.1f * float(q));
  }
  std::memset(g + emb.offset, 0, 18 * sizeof(float));
}

// One rank's run; STEP_DONE(s) after each step.
template <class OnStep>
void drive(const Registry& reg, ZeroOneAdam& opt, FlatBuffer& params, Reducer& red, int rank,
           int steps, OnStep&& step_done) {
  const int n = red.world();
  const size_t count = reg.total_numel();
  FlatBuffer g(count), mine(count);
  for (int s = 1; s <= steps; ++s) {
    if (opt.wants_allreduce(n)) {  // the parameters agree: every rank's gradient is at hand
      g.zero();
      for (int q = 0; q < n; ++q) {
        gradient(reg, q, s, params.data(), mine.data());
        for (size_t i = 0; i < count; ++i) g.data()[i] += mine.data()[i];
      }
      for (size_t i = 0; i < count; ++i) g.data()[i] /= float(n);
    } else {
      gradient(reg, rank, s, params.data(), g.data());
    }
    const double lr = 1e-2 * (1.0 + 0.5 * std::sin(0.3 * s));
    opt.step(params, g, lr, 0.75, red);
    step_done(s);
  }
}

// A Reducer that only exchanges signs, whole, at finish: begin keeps the call's buffers.
struct WholeSignReducer : Reducer {
  void average(float*, size_t) override { ADD_FAILURE() << "not used"; }
  bool any_rank(bool flag) override { return flag; }
  void begin_sign_average(float* b, float* w, float* s, size_t n, const SignCode& c, Part,
                          Input) override {
    buf = b, we = w, se = s, count = n, code = c;
  }
  float *buf = nullptr, *we = nullptr, *se = nullptr;
  size_t count = 0;
  SignCode code;
};

// The real transport: one sign_allreduce over the whole vector, cut at the tensors.
struct CommReducer final : WholeSignReducer {
  explicit CommReducer(std::vector<size_t> e) : ends(std::move(e)) {}
  int world() const override { return testing::world().size(); }
  SignExchange finish_sign_average(const Part& finish) override {
    const SignAllreduceStats st =
        sign_allreduce(testing::world(), buf, count, ends, we, se, code.scale);
    if (finish) finish(0, count);
    return {st.bytes_sent, st.worker_sq_err, st.worker_sq_norm};
  }
  std::vector<size_t> ends;
};

// N threads, one per simulated rank, meeting at each sign_average.
struct Sim {
  Sim(int n, size_t count, const std::vector<size_t>& ends) : sign(n, count, ends), meet(n) {}
  testing::SignSim sign;
  std::barrier<> meet;
};

struct SimReducer final : WholeSignReducer {
  SimReducer(Sim& s, int r) : sim(s), rank(r) {}
  int world() const override { return sim.sign.ranks(); }
  SignExchange finish_sign_average(const Part& finish) override {
    const size_t r = size_t(rank);
    std::memcpy(sim.sign.x[r].data(), buf, count * sizeof(float));
    std::memcpy(sim.sign.worker_error[r].data(), we, count * sizeof(float));
    std::memcpy(sim.sign.server_error[r].data(), se, count * sizeof(float));
    sim.meet.arrive_and_wait();
    if (rank == 0) sim.sign.step(code.scale);
    sim.meet.arrive_and_wait();
    std::memcpy(buf, sim.sign.x[r].data(), count * sizeof(float));
    std::memcpy(we, sim.sign.worker_error[r].data(), count * sizeof(float));
    std::memcpy(se, sim.sign.server_error[r].data(), count * sizeof(float));
    sim.meet.arrive_and_wait();  // every rank has its output before the next call
    if (finish) finish(0, count);
    return {};
  }
  Sim& sim;
  int rank;
};

// What is compared after each step: params, m, u, e_w, e_s.
std::vector<uint64_t> fingerprint(ZeroOneAdam& opt, const FlatBuffer& params) {
  return {fnv1a64(params.data(), params.bytes()), fnv1a64(opt.m().data(), opt.m().bytes()),
          fnv1a64(opt.u().data(), opt.u().bytes()),
          fnv1a64(opt.worker_error().data(), opt.worker_error().bytes()),
          fnv1a64(opt.server_error().data(), opt.server_error().bytes())};
}

ZeroOneParams schedule(size_t block, int steps) {
  // T_v = {1, 2, 4, 6}; compressed 3, 5, 7, 8; after F = 8: syncs 9-12, then local steps
  // at intervals 2 and 3.
  ZeroOneParams p;
  p.var_freeze_step = 8;
  p.var_update_scaler = 2;
  p.local_step_scaler = 4;
  p.local_step_clipper = 3;
  p.last_step = steps;
  p.code = {OneBitScale::mean_abs, block};
  return p;
}

void ExpectMatchesSimulation(size_t block) {
  const int n = world().size(), rank = world().rank();
  const int steps = 26;
  const Registry reg = make_registry();
  const size_t count = reg.total_numel();
  const AdamWParams hp{0.9, 0.999, 1e-8, 0.1};
  const ZeroOneParams zo = schedule(block, steps);
  const std::vector<size_t> ends = segment_ends(reg, block);

  // The simulation of all N ranks.
  std::vector<std::vector<std::vector<uint64_t>>> sim_prints(static_cast<size_t>(n));
  {
    Sim sim(n, count, ends);
    std::vector<std::thread> threads;
    for (int q = 0; q < n; ++q)
      threads.emplace_back([&, q] {
        ZeroOneAdam opt(reg, hp, zo);
        FlatBuffer params(count);
        for (size_t i = 0; i < count; ++i) params.data()[i] = 0.01f * float(i % 17) - 0.08f;
        SimReducer red(sim, q);
        drive(reg, opt, params, red, q, steps,
              [&](int) { sim_prints[size_t(q)].push_back(fingerprint(opt, params)); });
      });
    for (std::thread& t : threads) t.join();
  }

  // This rank on the real transport.
  ZeroOneAdam opt(reg, hp, zo);
  FlatBuffer params(count);
  for (size_t i = 0; i < count; ++i) params.data()[i] = 0.01f * float(i % 17) - 0.08f;
  CommReducer red(ends);
  int local_steps = 0, differing = 0;
  drive(reg, opt, params, red, rank, steps, [&](int s) {
    ASSERT_EQ(fingerprint(opt, params), sim_prints[size_t(rank)][size_t(s - 1)])
        << "step " << s << " (params, m, u, e_w, e_s)";
    const bool same = testing::identical_on_all_ranks(world(), params.data(), params.bytes());
    if (opt.replicas_agree()) EXPECT_TRUE(same) << "step " << s;
    const bool local = s > zo.var_freeze_step && !opt.schedule().syncs(s);
    local_steps += local;
    differing += local && !same;
  });
  EXPECT_EQ(local_steps, 7) << "local steps 13, 15, 17, 18, 21, 22 and 25";
  EXPECT_EQ(differing, local_steps) << "local steps move each rank its own way";
}

TEST(ZeroOneAdam, MatchesTheSingleProcessSimulationBitForBit) { ExpectMatchesSimulation(0); }

TEST(ZeroOneAdam, MatchesTheSimulationWithScaleBlocks) { ExpectMatchesSimulation(24); }

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
