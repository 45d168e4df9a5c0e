#include "comm/agree.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "core/checksum.h"
#include "core/error.h"

namespace ringstep {

void agree_on_inputs(int rank, const GatherFn& gather, const std::function<void()>& check) {
  std::string error;
  std::exception_ptr thrown;
  try {
    check();
  } catch (const InputError& e) {
    error = e.what();
    thrown = std::current_exception();
  }
  // 0: no error; else a hash of the message, never 0.
  const std::vector<uint64_t> all =
      gather(error.empty() ? 0 : fnv1a64(error.data(), error.size()) | 1);
  if (std::all_of(all.begin(), all.end(), [](uint64_t h) { return h == 0; })) return;
  if (all.size() == 1) std::rethrow_exception(thrown);  // nobody to agree with
  const uint64_t mine = all[size_t(rank)];
  std::vector<int> alike;
  for (int r = 0; r < int(all.size()); ++r)
    if (all[size_t(r)] == mine) alike.push_back(r);
  if (mine != 0 && alike.front() == rank) {
    std::string ranks;
    if (alike.size() < all.size())
      for (int r : alike) ranks += (ranks.empty() ? " (rank " : ", ") + std::to_string(r);
    std::fprintf(stderr, "ringstep: error%s: %s\n", (ranks.empty() ? "" : ranks + ")").c_str(),
                 error.c_str());
  }
  throw AlreadyReported{kExitBadInput};
}

}  // namespace ringstep
