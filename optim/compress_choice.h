// A compressed optimizer's compress: auto decision (1-bit Adam's, docs/optim.md "When
// compressing pays"), made once at the end of the warm-up from what this link measured and
// agreed over ranks: compressing removes the fp32 AllReduce's exposed time and adds the
// coding's time plus what of the 1-bit exchange would not fit where the fp32 one was hidden
// (its time in flight scaled by the bytes). The log line, summary.json's `compress_choice`
// and `ringstep report` all show this struct (train/run_summary.h lists its fields).
#pragma once

#include <cstdint>
#include <string>

namespace ringstep {

struct CompressChoice {
  double exposed_ms = 0, comm_ms = 0;     // the fp32 AllReduce's, median of the warm-up steps
  double sent_bytes = 0, sign_bytes = 0;  // per rank per step: fp32 ring, 1-bit exchange
  double code_ms = 0;                     // coding and decoding every part, once
  int64_t from_step = 0;                  // the first step the decision applies to

  double compressed_exposed_ms() const;
  bool compress() const { return exposed_ms > code_ms + compressed_exposed_ms(); }
  std::string describe() const;  // one line: which way, from when, and the numbers compared
};

}  // namespace ringstep
