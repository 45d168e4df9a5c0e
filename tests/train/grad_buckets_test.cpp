// The gradient buckets the report reasons about (gradient_buckets, from the model's spec) are
// the ones GradSync cuts from a built model's gradient buffer: same count, same boundaries,
// padding included (d_model 24 pads every bias and LayerNorm vector to 32 floats).
#include <gtest/gtest.h>

#include "models/gpt.h"
#include "train/grad_sync.h"
#include "train/report.h"

namespace ringstep {
namespace {

TEST(GradBuckets, TheReportCountsTheBucketsGradSyncCuts) {
  ModelConfig m;
  m.vocab_size = 50, m.seq_len = 40, m.d_model = 24, m.n_layers = 5, m.n_heads = 2;
  Gpt model(m);
  const size_t block_bytes =
      4 * (model.spec().layer_range(1).second - model.spec().layer_range(0).second);
  // From one block per bucket to everything in one, through every boundary case.
  for (size_t bytes = block_bytes / 2; bytes <= 8 * block_bytes; bytes += 64) {
    CommConfig cfg;
    cfg.bucket_mb = double(bytes) / 1048576.0;
    GradSync sync(nullptr, cfg);
    sync.setup(model);
    const auto& buckets = sync.buckets();
    ASSERT_EQ(gradient_buckets(m, cfg.bucket_mb), int(buckets.size())) << bytes;
    EXPECT_EQ(buckets.front().end, model.grads().size());
    EXPECT_EQ(buckets.back().begin, 0u);
    const auto spec = make_buckets(model.spec().bucket_units(), size_t(cfg.bucket_mb * 1048576.0));
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].begin, spec[b].begin);
      EXPECT_EQ(buckets[b].end, spec[b].end);
    }
  }
}

}  // namespace
}  // namespace ringstep
