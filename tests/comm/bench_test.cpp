// Option parsing of `ringstep bench allreduce` (comm/bench.h).
#include "comm/bench.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ringstep {
namespace {

TEST(CommBenchSize, ParsesSuffixesAsPowersOf1024) {
  EXPECT_EQ(parse_size_bytes("4096"), 4096u);
  EXPECT_EQ(parse_size_bytes("1K"), 1024u);
  EXPECT_EQ(parse_size_bytes("1k"), 1024u);
  EXPECT_EQ(parse_size_bytes("64M"), 64u << 20);
  EXPECT_EQ(parse_size_bytes("2G"), size_t{2} << 30);
  EXPECT_EQ(parse_size_bytes("16KiB"), 16u << 10);
  EXPECT_EQ(parse_size_bytes("2MB"), 2u << 20);
  EXPECT_EQ(parse_size_bytes("1.5K"), 1536u);
  EXPECT_EQ(parse_size_bytes("0"), 0u);
}

TEST(CommBenchSize, RejectsBadInputNamingIt) {
  for (const char* bad : {"", "K", "-1K", "1X", "1.3", "1KK", " 1K", "1e6"}) {
    try {
      parse_size_bytes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(CommBenchSizes, GeometricFromMinToMax) {
  EXPECT_EQ(bench_sizes(1024, 64 << 20, 4),
            (std::vector<size_t>{1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22,
                                 1 << 24, 1 << 26}));
  EXPECT_EQ(bench_sizes(1000, 5000, 2), (std::vector<size_t>{1000, 2000, 4000}));
  EXPECT_EQ(bench_sizes(4096, 4096, 1), (std::vector<size_t>{4096}));
  EXPECT_THROW(bench_sizes(2048, 1024, 2), InputError);
  EXPECT_THROW(bench_sizes(1024, 4096, 1), InputError);
  EXPECT_THROW(bench_sizes(0, 4096, 2), InputError);
}

TEST(CommBenchAlgos, ParsesAList) {
  EXPECT_EQ(parse_allreduce_algos("ring,native"),
            (std::vector<AllreduceAlgo>{AllreduceAlgo::ring, AllreduceAlgo::native}));
  EXPECT_EQ(parse_allreduce_algos("native"), (std::vector<AllreduceAlgo>{AllreduceAlgo::native}));
  EXPECT_THROW(parse_allreduce_algos("ring,"), InputError);
  EXPECT_THROW(parse_allreduce_algos("ring,mpi"), InputError);
}

TEST(CommBenchBusbw, FactorIsTwoNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(allreduce_busbw_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw_factor(4), 1.5);
}

}  // namespace
}  // namespace ringstep
