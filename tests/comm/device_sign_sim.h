// N ranks of comm/device_sign_allreduce.h in one process: every rank's stages run with the
// given kernels on the given runtime's memory, and the messages move between the ranks by
// that runtime's copies, as the all-to-all and the allgather would move them. The CPU
// tests run it with the kernels' twins against the reference simulation; the CUDA test runs
// it with the CUDA kernels against the twins.
#pragma once

#include <memory>
#include <vector>

#include "comm/device_sign_allreduce.h"
#include "core/runtime.h"

namespace ringstep::testing {

class DeviceSignSim {
 public:
  // Buffers of COUNT floats per rank in MEMORY (x, and both errors at 0).
  DeviceSignSim(int nranks, size_t count, const std::vector<size_t>& segment_ends, OneBitScale kind,
                Runtime& memory, SignKernels& kernels)
      : memory_(memory), count_(count) {
    for (int r = 0; r < nranks; ++r) {
      ranks_.push_back(std::make_unique<DeviceSignAllreduce>(count, segment_ends, nranks, r, kind,
                                                             memory, kernels));
      for (auto* v : {&x_, &worker_error_, &server_error_})
        v->push_back(static_cast<float*>(memory.alloc(count * sizeof(float))));
    }
  }
  ~DeviceSignSim() {
    for (auto* v : {&x_, &worker_error_, &server_error_})
      for (float* p : *v) memory_.free(p);
  }

  // One exchange of INPUT[r] (host memory, count each); returns every rank's output.
  std::vector<std::vector<float>> step(const std::vector<std::vector<float>>& input) {
    const int n = int(ranks_.size());
    const size_t bytes = ranks_[0]->message_bytes();
    for (int r = 0; r < n; ++r) {
      memory_.copy(x_[r], input[r].data(), count_ * sizeof(float));
      ranks_[r]->encode(x_[r], worker_error_[r], nullptr);
    }
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < n; ++q)
        if (q != r) memory_.copy(ranks_[r]->received(q), ranks_[q]->sent(r), bytes);
    for (int r = 0; r < n; ++r) ranks_[r]->serve(server_error_[r], nullptr);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < n; ++j)
        if (j != r) memory_.copy(ranks_[r]->gathered(j), ranks_[j]->gathered(j), bytes);
    std::vector<std::vector<float>> out;
    for (int r = 0; r < n; ++r) {
      ranks_[r]->decode(x_[r], nullptr);
      out.push_back(read(x_[r]));
    }
    return out;
  }
  std::vector<float> worker_error(int r) const { return read(worker_error_[r]); }
  std::vector<float> server_error(int r) const { return read(server_error_[r]); }

 private:
  std::vector<float> read(const float* p) const {
    std::vector<float> v(count_);
    memory_.copy(v.data(), p, count_ * sizeof(float));
    return v;
  }

  Runtime& memory_;
  size_t count_;
  std::vector<std::unique_ptr<DeviceSignAllreduce>> ranks_;
  std::vector<float*> x_, worker_error_, server_error_;
};

}  // namespace ringstep::testing
