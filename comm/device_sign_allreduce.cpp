#include "comm/device_sign_allreduce.h"

#include <algorithm>

#include "comm/sign_layout.h"

namespace ringstep {

struct DeviceSignAllreduce::Impl {
  SignLayout layout;
  int rank;
  bool mean_abs;
  Runtime& memory;
  SignKernels& kernels;
  std::vector<void*> owned;  // every allocation, freed at the end
  uint8_t *send = nullptr, *received = nullptr, *gathered = nullptr;
  SignTables tables;
  // The worker's scales: one part per segment; the server's: one part per scale slot of
  // this rank's message (empty where the slot's segment has nothing in the chunk).
  SignRuns worker_runs, server_runs;
  const size_t *worker_places = nullptr, *server_places = nullptr;
  size_t worker_place_count = 0, server_place_count = 0;
  double* run_sums = nullptr;
  float *segment_scales = nullptr, *slot_scales = nullptr;

  Impl(size_t count, const std::vector<size_t>& ends, int nranks, int r, OneBitScale kind,
       Runtime& mem, SignKernels& k)
      : layout(count, ends, nranks),
        rank(r),
        mean_abs(kind == OneBitScale::mean_abs),
        memory(mem),
        kernels(k) {
    const SignLayout& L = layout;
    const size_t messages = size_t(nranks) * L.block_bytes;
    send = static_cast<uint8_t*>(alloc(messages));
    received = static_cast<uint8_t*>(alloc(messages));
    gathered = static_cast<uint8_t*>(alloc(messages));
    tables = {L.count, L.chunk,        L.scale_bytes, L.block_bytes,
              nranks,  upload(L.ends), L.ends.size(), upload(L.first_segment)};

    std::vector<size_t> runs, part_runs{0}, places;
    for (const SignLayout::Run& run : L.runs) runs.insert(runs.end(), {run.begin, run.end});
    worker_runs = {upload(runs), L.runs.size(), upload(L.segment_runs), L.ends.size()};
    for (size_t k = 0; k < L.ends.size(); ++k) {
      const size_t start = L.segment_start(k), end = L.ends[k];
      for (int j = end > start ? int(start / L.chunk) : nranks;
           j < nranks && size_t(j) * L.chunk < end; ++j) {
        const Shard c = L.real(j);
        if (std::max(start, c.offset) < std::min(end, c.offset + c.count))
          places.insert(places.end(), {k, size_t(j) * L.block_bytes + L.scale_offset(j, k)});
      }
    }
    worker_places = upload(places);
    worker_place_count = places.size() / 2;

    const Shard c = L.real(rank);
    const size_t slots = L.scale_bytes / sizeof(float);
    runs.clear();
    places.clear();
    for (size_t p = 0; p < slots; ++p) {
      const size_t k = L.first_segment[size_t(rank)] + p;
      if (k < L.ends.size()) {
        const size_t b = std::max(L.segment_start(k), c.offset);
        const size_t e = std::min(L.ends[k], c.offset + c.count);
        for (size_t q = b; q < e; q += kScaleRun)
          runs.insert(runs.end(), {q, std::min(e, q + kScaleRun)});
        if (b < e)
          places.insert(places.end(), {p, size_t(rank) * L.block_bytes + p * sizeof(float)});
      }
      part_runs.push_back(runs.size() / 2);
    }
    server_runs = {upload(runs), runs.size() / 2, upload(part_runs), slots};
    server_places = upload(places);
    server_place_count = places.size() / 2;

    run_sums = static_cast<double*>(
        alloc(std::max(worker_runs.nruns, server_runs.nruns) * sizeof(double)));
    segment_scales = static_cast<float*>(alloc(L.ends.size() * sizeof(float)));
    slot_scales = static_cast<float*>(alloc(slots * sizeof(float)));
  }
  ~Impl() {
    for (void* p : owned) memory.free(p);
  }
  void* alloc(size_t bytes) { return owned.emplace_back(memory.alloc(bytes)); }
  const size_t* upload(const std::vector<size_t>& v) {
    void* p = alloc(v.size() * sizeof(size_t));
    if (!v.empty()) memory.copy(p, v.data(), v.size() * sizeof(size_t));
    return static_cast<const size_t*>(p);
  }
  uint8_t* message(uint8_t* buf, int j) const { return buf + size_t(j) * layout.block_bytes; }
};

DeviceSignAllreduce::DeviceSignAllreduce(size_t count, const std::vector<size_t>& segment_ends,
                                         int nranks, int rank, OneBitScale kind, Runtime& memory,
                                         SignKernels& kernels)
    : impl_(std::make_unique<Impl>(count, segment_ends, nranks, rank, kind, memory, kernels)) {}

DeviceSignAllreduce::~DeviceSignAllreduce() = default;

size_t DeviceSignAllreduce::message_bytes() const { return impl_->layout.block_bytes; }
uint8_t* DeviceSignAllreduce::sent(int j) { return impl_->message(impl_->send, j); }
uint8_t* DeviceSignAllreduce::received(int q) { return impl_->message(impl_->received, q); }
uint8_t* DeviceSignAllreduce::gathered(int j) { return impl_->message(impl_->gathered, j); }

void DeviceSignAllreduce::encode(const float* x, float* worker_error, StreamHandle s) {
  Impl& m = *impl_;
  SignKernels& k = m.kernels;
  const SignTables& t = m.tables;
  k.zero(m.send, size_t(t.nranks) * t.block_bytes, s);
  k.add_error(x, worker_error, t.count, s);
  k.scales(worker_error, m.worker_runs, m.mean_abs, m.run_sums, m.segment_scales, s);
  k.place_scales(m.segment_scales, m.worker_places, m.worker_place_count, m.send, s);
  k.code(worker_error, t, 0, t.nranks, m.segment_scales, 0, m.send, s);
}

void DeviceSignAllreduce::serve(float* server_error, StreamHandle s) {
  Impl& m = *impl_;
  SignKernels& k = m.kernels;
  const SignTables& t = m.tables;
  const int r = m.rank;
  k.server_sum(m.received, sent(r), t, r, server_error, s);
  k.zero(gathered(r), t.block_bytes, s);
  k.scales(server_error, m.server_runs, m.mean_abs, m.run_sums, m.slot_scales, s);
  k.place_scales(m.slot_scales, m.server_places, m.server_place_count, m.gathered, s);
  k.code(server_error, t, r, r + 1, m.slot_scales, m.layout.first_segment[size_t(r)], m.gathered,
         s);
}

void DeviceSignAllreduce::decode(float* x, StreamHandle s) const {
  impl_->kernels.decode(impl_->gathered, impl_->tables, x, s);
}

SignAllreduceStats DeviceSignAllreduce::run(DeviceComm& comm, float* x, float* worker_error,
                                            float* server_error) {
  const SignAllreduceStats st = queue_exchange(comm, x, worker_error, server_error);
  queue_decode(comm, x);
  return st;
}

SignAllreduceStats DeviceSignAllreduce::queue_exchange(DeviceComm& comm, const float* x,
                                                       float* worker_error, float* server_error) {
  Impl& m = *impl_;
  const int n = m.tables.nranks, r = m.rank;
  const size_t bytes = m.tables.block_bytes;
  SignAllreduceStats st;
  if (m.tables.count == 0) return st;
  comm.on_comm_stream([this, x, worker_error](StreamHandle s) { encode(x, worker_error, s); });
  // Peers in the order SignAllreduce sends to them: the right-hand neighbour first.
  std::vector<PeerSend> sends;
  std::vector<PeerRecv> recvs;
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    sends.push_back({sent(to), bytes, to});
    recvs.push_back({received(from), bytes, from});
  }
  if (n > 1) comm.send_recv(sends, recvs);
  comm.on_comm_stream([this, server_error](StreamHandle s) { serve(server_error, s); });
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    sends[size_t(k - 1)] = {gathered(r), bytes, to};
    recvs[size_t(k - 1)] = {gathered(from), bytes, from};
  }
  if (n > 1) comm.send_recv(sends, recvs);
  st.bytes_sent = 2 * size_t(n - 1) * bytes;
  return st;
}

void DeviceSignAllreduce::queue_decode(DeviceComm& comm, float* x) {
  if (impl_->tables.count == 0) return;
  comm.on_comm_stream([this, x](StreamHandle s) { decode(x, s); });
}

}  // namespace ringstep
