// Where the attention kernels find head h's values, shared by the CUDA kernels and their
// host twin (host and device code):
//   qkv   (B, T, 3C): q | k | v, head h at channels [h hs, (h+1) hs) of each
//   out   (B, T, C):  heads side by side (also dout)
//   state (B, NH, T): one fp32 value per (batch, head, query row): the log-sum-exp, and
//                     backward's D = rowsum(dO o O)
// C = NH hs. The kernels read and write these layouts in place: no per-head copies.
// Indices are size_t: B T 3C passes 2^31 at GPT-2 sizes with large batches.
#pragma once

#include <cstddef>

#include "core/host_device.h"

namespace ringstep::cuda {

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
