#include "core/registry.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "core/aligned_alloc.h"
#include "core/cuda/device.h"

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
#ifdef RINGSTEP_HAVE_CUDA
  if (device == Device::cuda) {
    data_ = static_cast<float*>(cuda::device_alloc(n * sizeof(float)));
    zero();
    return;
  }
#endif
  data_ = static_cast<float*>(allocate_buffer(n * sizeof(float)));
}

FlatBuffer::FlatBuffer(FlatBuffer&& o) noexcept : data_(o.data_), n_(o.n_), device_(o.device_) {
  o.data_ = nullptr;
  o.n_ = 0;
}

FlatBuffer& FlatBuffer::operator=(FlatBuffer&& o) noexcept {
  if (this != &o) {
    free_data();
    data_ = o.data_;
    n_ = o.n_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

FlatBuffer::~FlatBuffer() { free_data(); }

void FlatBuffer::free_data() {
#ifdef RINGSTEP_HAVE_CUDA
  if (device_ == Device::cuda) {
    cuda::device_free(data_);
    return;
  }
#endif
  release_buffer(data_);
}

void FlatBuffer::zero() {
#ifdef RINGSTEP_HAVE_CUDA
  if (device_ == Device::cuda) {
    cuda::device_memset_zero(data_, n_ * sizeof(float));
    return;
  }
#endif
  if (n_) std::memset(data_, 0, n_ * sizeof(float));
}

void copy_buffer(FlatBuffer& dst, const FlatBuffer& src) {
  if (dst.size() != src.size())
    throw std::invalid_argument("copy_buffer: " + std::to_string(src.size()) + " floats into " +
                                std::to_string(dst.size()));
#ifdef RINGSTEP_HAVE_CUDA
  if (dst.device() == Device::cuda || src.device() == Device::cuda) {
    cuda::copy_bytes(dst.data(), src.data(), src.bytes());
    return;
  }
#endif
  if (src.size()) std::memcpy(dst.data(), src.data(), src.bytes());
}

const FlatBuffer& on_host(const FlatBuffer& src, FlatBuffer& host_copy) {
  if (src.device() == Device::cpu) return src;
  host_copy = FlatBuffer(src.size());
  copy_buffer(host_copy, src);
  return host_copy;
}

}  // namespace ringstep
