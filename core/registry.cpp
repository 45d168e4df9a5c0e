#include "core/registry.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/aligned_alloc.h"

namespace ringstep {

size_t Registry::add(const std::string& name, std::vector<int64_t> shape, bool decay) {
  if (!index_.emplace(name, tensors_.size()).second) {
    throw std::logic_error("registry: duplicate tensor " + name);
  }
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  TensorInfo info{name, std::move(shape), total_, numel, DType::f32, decay};
  total_ += (numel + kAlignElems - 1) / kAlignElems * kAlignElems;
  tensors_.push_back(std::move(info));
  return tensors_.size() - 1;
}

const TensorInfo& Registry::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("registry: no tensor " + name);
  return tensors_[it->second];
}

size_t Registry::param_count() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.numel;
  return n;
}

FlatBuffer::FlatBuffer(size_t n, Device device) : n_(n), device_(device) {
  require_device(device, "flat buffer");
  data_ = static_cast<float*>(allocate_buffer(n * sizeof(float)));
}

FlatBuffer::FlatBuffer(FlatBuffer&& o) noexcept : data_(o.data_), n_(o.n_), device_(o.device_) {
  o.data_ = nullptr;
  o.n_ = 0;
}

FlatBuffer& FlatBuffer::operator=(FlatBuffer&& o) noexcept {
  if (this != &o) {
    release_buffer(data_);
    data_ = o.data_;
    n_ = o.n_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

FlatBuffer::~FlatBuffer() { release_buffer(data_); }

void FlatBuffer::zero() {
  if (n_) std::memset(data_, 0, n_ * sizeof(float));
}

}  // namespace ringstep
