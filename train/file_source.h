// The file data source: a stream of token files cut into windows of seq_len + 1 tokens,
// read in one order per epoch that the ranks share (docs/data.md "Token files: order,
// epochs and positions").
#pragma once

#include <memory>
#include <string>

#include "train/data.h"

namespace ringstep {

// data.path's tokens (train/token_stream.h: one file or a glob, one stream) for SPLIT of
// rank RANK of WORLD. Needs at least 2 * (seq_len + 1) tokens in the stream. Without
// data.val_path the last max(10%, seq_len + 1) tokens are the val part. The train windows
// form one order per epoch that the ranks share, file order or with data.shuffle a new order
// each epoch (seeded by run.seed and the epoch); each micro-batch, rank r reads its own slice
// of the world's next slots, so ranks never share a window. Val reads its windows in order.
// Throws InputError on bad data, and when a data.val_path file is also one of data.path's.
std::unique_ptr<DataSource> make_file_source(const Config& cfg, const std::string& split, int rank,
                                             int world);

}  // namespace ringstep
