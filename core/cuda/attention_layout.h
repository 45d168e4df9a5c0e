// Index maps between the model's attention layout and the per-head layout the batched
// products use, shared by the CUDA kernels and the CPU tests (host and device code):
//   qkv  (B, T, 3C): q | k | v, head h at channels [h hs, (h+1) hs) of each
//   heads (B, NH, T, hs): one contiguous (T, hs) matrix per (batch, head), BH = B NH
//   out  (B, T, C): heads side by side
// C = NH hs. Indices are size_t: B T 3C passes 2^31 at GPT-2 sizes with large batches.
#pragma once

#include <cstddef>

#include "core/host_device.h"

namespace ringstep::cuda {

// Element I of a heads tensor (B, NH, T, hs) -> offset of the same value in qkv for
// PART 0 (q), 1 (k) or 2 (v).
RINGSTEP_HD size_t heads_to_qkv(size_t i, int part, int T, int NH, int hs) {
  const size_t d = i % hs, t = (i / hs) % T, h = (i / (size_t(hs) * T)) % NH;
  const size_t b = i / (size_t(hs) * T * NH), C = size_t(NH) * hs;
  return (b * T + t) * 3 * C + size_t(part) * C + h * hs + d;
}

// Element I of an (B, T, C) tensor -> offset of the same value in a heads tensor.
RINGSTEP_HD size_t btc_to_heads(size_t i, int T, int NH, int hs) {
  const size_t C = size_t(NH) * hs, c = i % C, bt = i / C;
  const size_t b = bt / T, t = bt % T, h = c / hs, d = c % hs;
  return ((b * NH + h) * T + t) * hs + d;
}

// Direct maps for kernels that read the layouts in place (no per-head copies):
// Offset in qkv of element D of head H of PART (0 q, 1 k, 2 v) for token T of sequence B.
RINGSTEP_HD size_t qkv_index(int b, int t, int part, int h, int d, int T, int C, int hs) {
  return (size_t(b) * T + t) * 3 * C + size_t(part) * C + size_t(h) * hs + d;
}

// Offset in a (B, T, C) tensor of element D of head H for token T of sequence B.
RINGSTEP_HD size_t btc_index(int b, int t, int h, int d, int T, int C, int hs) {
  return (size_t(b) * T + t) * C + size_t(h) * hs + d;
}

// Offset in a (B, NH, T) row-state tensor of query row T of head BH = b NH + h.
RINGSTEP_HD size_t row_index(int bh, int t, int T) { return size_t(bh) * T + t; }

}  // namespace ringstep::cuda
