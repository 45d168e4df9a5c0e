// Training data: a stream of token sequences per rank, from the seeded synthetic Markov
// source (default; its entropy floor is known exactly) or from a byte-level token file
// written by `ringstep prepare` (docs/data.md, docs/formats.md). Errors in user data are
// InputError naming the file, the offset and what was expected.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "core/config.h"

namespace ringstep {

// A stream of training sequences. next_batch fills inputs[B*T] and targets[B*T] from B
// consecutive windows of T+1 tokens: row i holds window i's first T tokens as inputs and
// its last T as targets (targets are inputs shifted by one). Not thread-safe.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual void next_batch(int32_t* inputs, int32_t* targets, int B, int T) = 0;
  virtual void reset() = 0;  // back to the start of this stream
  // Where the stream is, as a count seek() understands (tokens drawn for the synthetic
  // source, windows read for a token file): a stream seeked to another one's position
  // delivers the same batches from then on. What a checkpoint saves.
  virtual uint64_t position() const = 0;
  virtual void seek(uint64_t position) = 0;
  virtual std::string describe() const = 0;  // one line for the log header
};

// What is known about the data's entropy, in nats/token; NaN when unknown (token files).
// entropy_rate: no model beats it. window_floor: the least mean per-position cross-entropy
// a causal model can reach on windows of model.seq_len tokens (>= entropy_rate).
struct DataInfo {
  double entropy_rate = std::numeric_limits<double>::quiet_NaN();
  double window_floor = std::numeric_limits<double>::quiet_NaN();
};

// SPLIT is "train" or "val". Train streams of different ranks are disjoint; the val
// stream is held out and identical on every rank. Throws InputError on bad data.
std::unique_ptr<DataSource> make_data_source(const Config& cfg, const std::string& split, int rank,
                                             int world);
DataInfo data_info(const Config& cfg);

// `ringstep prepare`: one token per byte of INPUT_TEXT_PATH (vocab 256), written to
// OUTPUT_PATH.tmp and renamed, so a failure leaves no output. Throws InputError (an empty
// OUTPUT_PATH, an input that is not a regular file, an empty input, a failed write).
void prepare_tokens(const std::string& input_text_path, const std::string& output_path);

}  // namespace ringstep
