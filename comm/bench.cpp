#include "comm/bench.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/backoff.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl/nccl_comm.h"
#include "core/error.h"

namespace ringstep {

size_t parse_size_bytes(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InputError("bad size '" + text + "': " + why +
                      " (expected e.g. 4096, 1K, 64M, 1G; K/M/G are powers of 1024)");
  };
  size_t i = 0;
  double number = 0;
  bool digits = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    number = number * 10 + (text[i++] - '0');
    digits = true;
  }
  if (i < text.size() && text[i] == '.') {
    double scale = 0.1;
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      number += (text[i] - '0') * scale;
      scale /= 10;
      digits = true;
    }
  }
  if (!digits) throw bad("no number");
  std::string unit;
  for (; i < text.size(); ++i)
    unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  static const std::map<std::string, double> units = {
      {"", 1.0},           {"B", 1.0},           {"K", 1024.0},        {"KB", 1024.0},
      {"KIB", 1024.0},     {"M", 1048576.0},     {"MB", 1048576.0},    {"MIB", 1048576.0},
      {"G", 1073741824.0}, {"GB", 1073741824.0}, {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end()) throw bad("unknown unit '" + text.substr(text.size() - unit.size()) + "'");
  const double bytes = number * it->second;
  if (bytes != std::floor(bytes)) throw bad("not a whole number of bytes");
  if (bytes > 1e15) throw bad("too large");
  return static_cast<size_t>(bytes);
}

std::vector<AllreduceAlgo> parse_allreduce_algos(const std::string& csv) {
  std::vector<AllreduceAlgo> algos;
  size_t start = 0;
  while (start <= csv.size()) {
    const size_t comma = std::min(csv.find(',', start), csv.size());
    const std::string name = csv.substr(start, comma - start);
    if (name.empty())
      throw InputError("bad --algo '" + csv + "': empty name; expected e.g. ring,native");
    const AllreduceAlgo algo = parse_name<AllreduceAlgo>(name, "allreduce algorithm");
    if (std::find(algos.begin(), algos.end(), algo) == algos.end()) algos.push_back(algo);
    start = comma + 1;
  }
  return algos;
}

std::vector<size_t> bench_sizes(size_t min_bytes, size_t max_bytes, int factor) {
  if (min_bytes > max_bytes)
    throw InputError("bench: -b " + std::to_string(min_bytes) + " is larger than -e " +
                     std::to_string(max_bytes));
  if (factor < 2 && min_bytes != max_bytes)
    throw InputError("bench: -f must be at least 2 (got " + std::to_string(factor) + ")");
  if (min_bytes == 0 && max_bytes > 0) throw InputError("bench: -b must be at least 1 byte");
  std::vector<size_t> sizes = {min_bytes};
  if (min_bytes == max_bytes) return sizes;
  const auto f = static_cast<size_t>(factor);
  while (sizes.back() <= max_bytes / f) sizes.push_back(sizes.back() * f);
  return sizes;
}

double allreduce_busbw_factor(int nranks) { return nranks > 0 ? 2.0 * (nranks - 1) / nranks : 0.0; }

namespace {

// Inputs whose sum is exact in any order and any dtype: small integers (|v| <= 4) times a
// power of two that depends on the position only, so every partial sum is an integer
// (|.| <= 4N) times that power, representable in bf16 for N <= 64.
float bench_value(int rank, size_t i) {
  const int small = static_cast<int>((i + 3 * static_cast<size_t>(rank)) % 9) - 4;
  return std::ldexp(static_cast<float>(small), static_cast<int>(i % 5) - 2);
}

void store(DType dt, void* buf, size_t i, float v) {
  if (dt == DType::f32) {
    static_cast<float*>(buf)[i] = v;
  } else {
    static_cast<uint16_t*>(buf)[i] = dt == DType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
  }
}

bool same_bits(DType dt, const void* a, const void* b, size_t i) {
  const size_t es = dtype_size(dt);
  return std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es,
                     es) == 0;
}

struct Row {
  double time_us = 0;
  long long wrong = 0;
};

// Element-wise op over ranks of a small host array of a type no DType covers (double, long
// long): gathered (allgather_bytes) and combined in rank order, so every rank gets the
// same bits. Bookkeeping only: it moves size * count elements to every rank.
template <class T>
void allreduce_gathered(Communicator& comm, T* buf, size_t count, ReduceOp op) {
  const auto n = static_cast<size_t>(comm.size());
  std::vector<T> all(n * count);
  std::copy(buf, buf + count, all.begin() + static_cast<ptrdiff_t>(comm.rank() * count));
  comm.allgather_bytes(all.data(), count * sizeof(T));
  for (size_t i = 0; i < count; ++i) {
    T acc = all[i];
    for (size_t r = 1; r < n; ++r) {
      const T v = all[r * count + i];
      acc = op == ReduceOp::sum   ? acc + v
            : op == ReduceOp::max ? std::max(acc, v)
                                  : std::min(acc, v);
    }
    buf[i] = acc;
  }
}

// Where the timed AllReduce runs: load() puts the input in place (untimed), run() is the
// timed call, returning once the result is complete, result() reads it back (untimed).
class Lane {
 public:
  virtual ~Lane() = default;
  virtual void load(const std::byte* input, size_t bytes) = 0;
  virtual void run(AllreduceAlgo algo, size_t count, DType dt, const RingOptions& ring) = 0;
  virtual const std::byte* result(size_t bytes) = 0;
};

// Host buffers: our ring over the communicator's point-to-point, or its own AllReduce.
class HostLane final : public Lane {
 public:
  explicit HostLane(Communicator& comm) : comm_(comm) {}
  void load(const std::byte* input, size_t bytes) override {
    work_.resize(bytes);
    if (bytes) std::memcpy(work_.data(), input, bytes);
  }
  void run(AllreduceAlgo algo, size_t count, DType dt, const RingOptions& ring) override {
    allreduce(comm_, algo, work_.data(), count, dt, ring);
  }
  const std::byte* result(size_t) override { return work_.data(); }

 private:
  Communicator& comm_;
  std::vector<std::byte> work_;
};

#ifdef RINGSTEP_HAVE_NCCL
// Device buffers: our ring over NCCL send/recv, or ncclAllReduce; a run waits for the
// stream (at most 60 s, then the communicator is aborted).
class NcclLane final : public Lane {
 public:
  explicit NcclLane(Communicator& host) : nccl_(host) {}
  ~NcclLane() override { cuda::device_free(work_); }
  void load(const std::byte* input, size_t bytes) override {
    if (bytes > capacity_) {
      cuda::device_free(work_);
      work_ = cuda::device_alloc(bytes);
      capacity_ = bytes;
    }
    if (bytes) cuda::copy_to_device(work_, input, bytes);
  }
  void run(AllreduceAlgo algo, size_t count, DType dt, const RingOptions& ring) override {
    if (algo == AllreduceAlgo::ring)
      nccl_.allreduce_ring(work_, count, dt, ring, nullptr);
    else
      nccl_.allreduce_native(work_, count, dt, false, nullptr);
    nccl_.synchronize(nullptr, 60.0);
  }
  const std::byte* result(size_t bytes) override {
    host_.resize(bytes);
    if (bytes) cuda::copy_to_host(host_.data(), work_, bytes);
    return host_.data();
  }

 private:
  nccl::NcclComm nccl_;
  void* work_ = nullptr;
  size_t capacity_ = 0;
  std::vector<std::byte> host_;
};
#endif

std::unique_ptr<Lane> make_lane(CommBackend backend, Communicator& comm) {
  if (backend == CommBackend::mpi) return std::make_unique<HostLane>(comm);
  if (const std::string why = nccl::unavailable_reason(); !why.empty())
    throw InputError("bench: --backend nccl: " + why);
#ifdef RINGSTEP_HAVE_NCCL
  return std::make_unique<NcclLane>(comm);
#else
  return nullptr;  // unavailable_reason said why
#endif
}

// Algorithms are interleaved iteration by iteration (ring, native, ring, native, ...) so
// that background load and frequency changes touch both alike and the ratio stays fair.
class Bench {
 public:
  Bench(const AllreduceBenchOptions& opts, Communicator& comm, Lane& lane)
      : opts_(opts), comm_(comm), lane_(lane) {}

  std::vector<Row> measure(size_t count) {
    const DType dt = opts_.dtype;
    const size_t bytes = count * dtype_size(dt);
    input_.resize(bytes);
    expected_.resize(bytes);
    for (size_t i = 0; i < count; ++i) {
      store(dt, input_.data(), i, bench_value(comm_.rank(), i));
      double sum = 0;
      for (int r = 0; r < comm_.size(); ++r) sum += bench_value(r, i);
      store(dt, expected_.data(), i, static_cast<float>(sum));
    }
    RingOptions ring = opts_.ring;
    ring.op = ReduceOp::sum;
    ring.average = false;
    const size_t nalgo = opts_.algos.size();
    std::vector<std::vector<double>> times(nalgo);
    std::vector<Row> rows(nalgo);
    auto iteration = [&](bool check) {
      for (size_t a = 0; a < nalgo; ++a) {
        lane_.load(input_.data(), bytes);
        comm_.barrier();
        const int64_t t0 = steady_now_ns();
        lane_.run(opts_.algos[a], count, dt, ring);
        times[a].push_back((steady_now_ns() - t0) * 1e-3);
        if (check) rows[a].wrong = count_wrong(lane_.result(bytes), count);
      }
    };
    const int warmup = opts_.warmup > 0 ? opts_.warmup : bytes < (size_t{1} << 20) ? 20 : 5;
    for (int i = 0; i < warmup; ++i) iteration(false);
    int iters = opts_.iters;
    if (iters <= 0) {  // the same decision on every rank: from the slowest rank's warm-up
      double est_us = 1.0;
      for (auto& t : times) est_us = std::max(est_us, slowest_median(t));
      iters = static_cast<int>(std::clamp(0.25e6 / est_us, 10.0, 1000.0));
    }
    for (auto& t : times) t.clear();
    for (int i = 0; i < iters; ++i) iteration(i == iters - 1);
    for (size_t a = 0; a < nalgo; ++a) {
      rows[a].time_us = slowest_median(times[a]);
      allreduce_gathered(comm_, &rows[a].wrong, 1, ReduceOp::sum);
    }
    return rows;
  }

 private:
  long long count_wrong(const std::byte* got, size_t count) const {
    long long wrong = 0;
    for (size_t i = 0; i < count; ++i)
      wrong += same_bits(opts_.dtype, got, expected_.data(), i) ? 0 : 1;
    return wrong;
  }

  // Median over iterations of the slowest rank's time for each iteration.
  double slowest_median(std::vector<double> times) {
    allreduce_gathered(comm_, times.data(), times.size(), ReduceOp::max);
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  }

  const AllreduceBenchOptions& opts_;
  Communicator& comm_;
  Lane& lane_;
  std::vector<std::byte> input_, expected_;
};

std::string algo_list(const std::vector<AllreduceAlgo>& algos) {
  std::string s;
  for (AllreduceAlgo a : algos) {
    if (!s.empty()) s += ',';
    s += name(a);
  }
  return s;
}

}  // namespace

namespace {

void print_header(const AllreduceBenchOptions& opts, const Communicator& comm, bool ratio) {
  std::printf(
      "# ringstep bench allreduce: %d ranks (%d on this node), backend %s (%s buffers), dtype %s,"
      " algos %s\n",
      comm.size(), comm.local_size(), name(opts.backend),
      opts.backend == CommBackend::nccl ? "device" : "host", dtype_name(opts.dtype),
      algo_list(opts.algos).c_str());
  const bool spin = opts.wait.spin_ns == WaitPolicy::spin().spin_ns;
  std::printf(
      "# warmup %s, iters %s, ring sub-chunk %s, window %d, recursive doubling <= %zu B,"
      " waits %s\n",
      opts.warmup ? std::to_string(opts.warmup).c_str() : "auto",
      opts.iters ? std::to_string(opts.iters).c_str() : "auto",
      opts.ring.chunk_bytes ? (std::to_string(opts.ring.chunk_bytes) + " B").c_str()
                            : "by the ring's rule",
      opts.ring.window, opts.ring.small_bytes, spin ? "spin" : "polite (backoff)");
  if (link_enabled(opts.link))
    std::printf("# link emulation ON: %.3g Gb/s, %.3g us latency\n", opts.link.bandwidth_gbps,
                opts.link.latency_us);
  std::printf(
      "# time = median over iterations of the slowest rank (barrier before each);"
      " algbw = bytes/time; busbw = algbw*2(n-1)/n; GB = 1e9 B\n");
  std::printf("#%11s %12s %6s %7s %12s %12s %12s %7s%s\n", "size(B)", "count", "type", "algo",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", ratio ? "  ring/native" : "");
  std::fflush(stdout);
}

// One table row (and JSON line when JSON is open) of ALGO at BYTES; RATIO_TEXT is the
// ring/native column or "".
void print_row(const AllreduceBenchOptions& opts, int ranks, size_t bytes, AllreduceAlgo algo,
               const Row& row, double busbw, const std::string& ratio_text, std::ofstream& json) {
  const size_t count = bytes / dtype_size(opts.dtype);
  const double algbw = row.time_us > 0 ? bytes / (row.time_us * 1e3) : 0.0;
  std::printf(" %11zu %12zu %6s %7s %12.2f %12.3f %12.3f %7lld%s\n", bytes, count,
              dtype_name(opts.dtype), name(algo), row.time_us, algbw, busbw, row.wrong,
              ratio_text.c_str());
  std::fflush(stdout);
  if (!json.is_open()) return;
  const nlohmann::json j = {{"algo", name(algo)}, {"dtype", dtype_name(opts.dtype)},
                            {"ranks", ranks},     {"bytes", bytes},
                            {"count", count},     {"time_us", row.time_us},
                            {"algbw_gbs", algbw}, {"busbw_gbs", busbw},
                            {"wrong", row.wrong}};
  json << j.dump() << '\n' << std::flush;
}

}  // namespace

int run_allreduce_bench(const AllreduceBenchOptions& opts) {
  const std::vector<size_t> sizes = bench_sizes(opts.min_bytes, opts.max_bytes, opts.factor);
  if (opts.algos.empty()) throw InputError("bench: --algo lists no algorithm");
  if (opts.iters < 0 || opts.warmup < 0)
    throw InputError("bench: --iters and --warmup must be >= 0");
  MpiSession session(nullptr, nullptr);
  ScopedWaitPolicy wait(opts.wait);
  MpiCommunicator comm(MPI_COMM_WORLD, opts.link);
  const bool root = comm.rank() == 0;

  std::ofstream json;
  float json_ok = 1;
  if (root && !opts.json_path.empty()) {
    json.open(opts.json_path, std::ios::out | std::ios::trunc);
    json_ok = json.good() ? 1 : 0;
  }
  comm.broadcast(&json_ok, 1, DType::f32, 0);
  if (json_ok == 0)
    throw InputError("bench: cannot open --json file '" + opts.json_path + "' for writing");

  const double bus = allreduce_busbw_factor(comm.size());
  auto has = [&](AllreduceAlgo a) {
    return std::find(opts.algos.begin(), opts.algos.end(), a) != opts.algos.end();
  };
  const bool ratio = has(AllreduceAlgo::ring) && has(AllreduceAlgo::native);
  const std::unique_ptr<Lane> lane = make_lane(opts.backend, comm);  // same answer on every rank
  if (root) print_header(opts, comm, ratio);

  Bench bench(opts, comm, *lane);
  long long total_wrong = 0;
  for (size_t size : sizes) {
    const size_t bytes = size / dtype_size(opts.dtype) * dtype_size(opts.dtype);
    const std::vector<Row> rows = bench.measure(bytes / dtype_size(opts.dtype));
    std::map<AllreduceAlgo, double> busbw;
    for (size_t a = 0; a < rows.size(); ++a)
      busbw[opts.algos[a]] = rows[a].time_us > 0 ? bytes / (rows[a].time_us * 1e3) * bus : 0.0;
    for (size_t a = 0; a < rows.size(); ++a) {
      const AllreduceAlgo algo = opts.algos[a];
      total_wrong += rows[a].wrong;
      if (!root) continue;
      std::string ratio_text;
      if (ratio && algo == AllreduceAlgo::ring && busbw[AllreduceAlgo::native] > 0) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "  %11.3f",
                      busbw[AllreduceAlgo::ring] / busbw[AllreduceAlgo::native]);
        ratio_text = buf;
      }
      print_row(opts, comm.size(), bytes, algo, rows[a], busbw[algo], ratio_text, json);
    }
  }
  if (root && total_wrong) std::printf("# %lld wrong values\n", total_wrong);
  return total_wrong ? 1 : 0;
}

}  // namespace ringstep
