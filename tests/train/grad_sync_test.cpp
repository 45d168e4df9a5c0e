// GradSync with one rank: every agreement is local (optim/reducer.h's contract).
#include "train/grad_sync.h"

#include <gtest/gtest.h>

#include <vector>

namespace ringstep {
namespace {

TEST(GradSync, OneRankReducerIsLocal) {
  GradSync sync(nullptr, CommConfig{});
  Reducer& reducer = sync;
  EXPECT_EQ(reducer.world(), 1);
  EXPECT_TRUE(reducer.any_rank(true));
  EXPECT_FALSE(reducer.any_rank(false));
  std::vector<float> buf = {1.5f, -2.0f, 3.25f};
  reducer.average(buf.data(), buf.size());
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

}  // namespace
}  // namespace ringstep
