#include "core/registry.h"

#include <stdexcept>
#include <string>

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

FlatBuffer::FlatBuffer() : rt_(&ringstep::runtime(Device::cpu)) {}

FlatBuffer::FlatBuffer(size_t n, Device device)
    : n_(n), rt_(&ringstep::runtime(device, "flat buffer")) {
  data_ = static_cast<float*>(rt_->alloc(n * sizeof(float)));
}

FlatBuffer::FlatBuffer(size_t n, Runtime& rt) : n_(n), rt_(&rt) {
  data_ = static_cast<float*>(rt_->alloc(n * sizeof(float)));
}

FlatBuffer::FlatBuffer(FlatBuffer&& o) noexcept : data_(o.data_), n_(o.n_), rt_(o.rt_) {
  o.data_ = nullptr;
  o.n_ = 0;
}

FlatBuffer& FlatBuffer::operator=(FlatBuffer&& o) noexcept {
  if (this != &o) {
    free_data();
    data_ = o.data_;
    n_ = o.n_;
    rt_ = o.rt_;
    o.data_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

FlatBuffer::~FlatBuffer() { free_data(); }

void FlatBuffer::free_data() { rt_->free(data_); }

void FlatBuffer::zero() { rt_->zero(data_, bytes()); }

void copy_buffer(FlatBuffer& dst, const FlatBuffer& src) {
  if (dst.size() != src.size())
    throw std::invalid_argument("copy_buffer: " + std::to_string(src.size()) + " floats into " +
                                std::to_string(dst.size()));
  // A device runtime copies between its memory and the host's; the host's copies host to host.
  Runtime& rt = dst.runtime().host_memory() ? src.runtime() : dst.runtime();
  rt.copy(dst.data(), src.data(), src.bytes());
}

const FlatBuffer& on_host(const FlatBuffer& src, FlatBuffer& host_copy) {
  if (src.runtime().host_memory()) return src;
  host_copy = FlatBuffer(src.size());
  copy_buffer(host_copy, src);
  return host_copy;
}

}  // namespace ringstep
