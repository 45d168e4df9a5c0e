// One registry describes one flat buffer: each tensor's name, shape, offset (in elements)
// and dtype. Parameters, gradients and optimizer moments share one registry and differ
// only in the buffer they index, so AllReduce, clipping and checkpointing are
// single-buffer operations. Not thread-safe while being built; read-only afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/runtime.h"

namespace ringstep {

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // elements from the start of the buffer
  size_t numel = 0;
  DType dtype = DType::f32;
  bool decay = true;  // AdamW weight decay applies (false for LayerNorm and biases)
};

class Registry {
 public:
  // Appends a tensor; offsets are aligned to kAlignElems so every tensor starts on a
  // 64-byte boundary. Returns its index. Throws std::logic_error on a duplicate name.
  size_t add(const std::string& name, std::vector<int64_t> shape, bool decay = true);
  const TensorInfo& at(size_t i) const { return tensors_[i]; }
  const TensorInfo& find(const std::string& name) const;  // throws std::out_of_range
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  size_t total_numel() const { return total_; }  // buffer length, padding included
  size_t param_count() const;                    // sum of numel, padding excluded

  static constexpr size_t kAlignElems = 16;

 private:
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> index: add and find are O(1)
  size_t total_ = 0;
};

// A 64-byte aligned, zero-initialised float buffer laid out by a registry, in the memory
// of one device: one allocation of its runtime (InputError where runtime() refuses it).
class FlatBuffer {
 public:
  FlatBuffer();  // empty, in host memory
  explicit FlatBuffer(size_t n, Device device = Device::cpu);
  FlatBuffer(size_t n, Runtime& rt);  // in RT's memory (a test's own runtime)
  FlatBuffer(FlatBuffer&& o) noexcept;
  FlatBuffer& operator=(FlatBuffer&& o) noexcept;
  FlatBuffer(const FlatBuffer&) = delete;
  FlatBuffer& operator=(const FlatBuffer&) = delete;
  ~FlatBuffer();

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(float); }
  Device device() const { return rt_->device(); }
  Runtime& runtime() const { return *rt_; }
  float* at(const TensorInfo& t) { return data_ + t.offset; }
  const float* at(const TensorInfo& t) const { return data_ + t.offset; }
  void zero();

 private:
  void free_data();

  float* data_ = nullptr;
  size_t n_ = 0;
  Runtime* rt_;
};

// dst = src, element for element, between any two devices (sizes must match:
// std::invalid_argument otherwise). Blocking.
void copy_buffer(FlatBuffer& dst, const FlatBuffer& src);
// SRC itself when it is in host memory, else SRC copied into HOST_COPY (reallocated to
// host memory of SRC's size): a host view to read, hash or write a buffer of any device.
const FlatBuffer& on_host(const FlatBuffer& src, FlatBuffer& host_copy);

}  // namespace ringstep
