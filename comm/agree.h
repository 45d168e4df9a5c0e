// One message per cause when ranks check their inputs apart: the ranks agree on whether any
// of them met a bad input before anything else is communicated (docs/launch.md, "When a
// rank fails").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ringstep {

// Every rank's VALUE, in rank order; collective (an allgather).
using GatherFn = std::function<std::vector<uint64_t>(uint64_t value)>;

// Runs CHECK on this rank (RANK), then agrees on its outcome through GATHER. Where CHECK
// threw InputError on some rank, each distinct message is printed once, by the lowest rank
// that met it (naming the ranks unless every rank met it), and every rank throws
// AlreadyReported{kExitBadInput}. With one rank, the InputError propagates as it is, and so
// do other exceptions always.
void agree_on_inputs(int rank, const GatherFn& gather, const std::function<void()>& check);

}  // namespace ringstep
