// Non-owning views of float arrays with a shape, row-major. A view never allocates or
// frees; whoever owns the buffer (a flat buffer, the arena) must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

namespace ringstep {

inline int64_t shape_numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

struct TensorView {
  float* data = nullptr;
  std::vector<int64_t> shape;
  int64_t numel() const { return shape_numel(shape); }
};

struct ConstTensorView {
  const float* data = nullptr;
  std::vector<int64_t> shape;
  ConstTensorView() = default;
  ConstTensorView(const float* d, std::vector<int64_t> s) : data(d), shape(std::move(s)) {}
  ConstTensorView(const TensorView& v) : data(v.data), shape(v.shape) {}  // NOLINT: widening
  int64_t numel() const { return shape_numel(shape); }
};

}  // namespace ringstep
