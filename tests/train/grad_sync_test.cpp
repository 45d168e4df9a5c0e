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

// 1-bit Adam's scales are per tensor: each bucket is cut where a tensor starts inside it;
// a tensor crossing the bucket's start is cut there too, and the last end is the bucket's.
TEST(GradSync, BucketsAreCutAtTensorStarts) {
  std::vector<Bucket> buckets = {{100, 200, 0, 0, {}}, {0, 100, 1, 1, {}}};
  cut_at_tensors(buckets, {150, 0, 40, 100, 180, 48});
  EXPECT_EQ(buckets[0].tensor_ends, (std::vector<size_t>{50, 80, 100}));
  EXPECT_EQ(buckets[1].tensor_ends, (std::vector<size_t>{40, 48, 100}));
}

}  // namespace
}  // namespace ringstep
