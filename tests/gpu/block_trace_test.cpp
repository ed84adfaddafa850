// The per-block trace's phase summary (kernels/cuda/trace/block_trace.h), on hand-made stamps:
// host only, so it runs in CI.
#include <gtest/gtest.h>

#include <vector>

#include "ridge/kernels/cuda/trace/block_trace.h"

namespace {

using ridge::kernels::detail::kPhaseEntries;
using ridge::kernels::detail::summarize_phases;

struct Block {
  unsigned long long entry, begin, end, exit, sm;
};

std::vector<unsigned long long> entries(const std::vector<Block>& blocks) {
  std::vector<unsigned long long> h;
  for (const Block& b : blocks) h.insert(h.end(), {b.entry, b.begin, b.end, b.exit, b.sm});
  EXPECT_EQ(h.size(), blocks.size() * kPhaseEntries);
  return h;
}

// Two overlapping blocks on SM 3 (ns): A resident 1,000-5,000 and streaming 2,000-4,000; B
// resident 3,000-7,000 and streaming 4,500-6,000. The SM's time is 1,000-7,000 (6,000 ns); blocks
// resident: 1 + 2 + 1 over 2,000 + 2,000 + 2,000 ns, so 4/3 on average; no block streams in
// 1,000-2,000, 4,000-4,500 and 6,000-7,000: 2,500 ns, a share of 5/12.
TEST(BlockTrace, PhasesOfOverlappingBlocksOnOneSm) {
  const auto h = entries({{1000, 2000, 4000, 5000, 3}, {3000, 4500, 6000, 7000, 3}});
  const auto p = summarize_phases(h.data(), 2);
  EXPECT_EQ(p.blocks, 2);
  EXPECT_DOUBLE_EQ(p.span_us, 6.0);
  EXPECT_NEAR(p.resident, 4.0 / 3.0, 1e-12);
  EXPECT_NEAR(p.idle_share, 5.0 / 12.0, 1e-12);
  // Start 1.0 and 1.5 us, tiles 2.0 and 1.5, finish 1.0 and 1.0: p50 is the upper of two.
  EXPECT_DOUBLE_EQ(p.phase_us[0][1], 1.5);
  EXPECT_DOUBLE_EQ(p.phase_us[1][1], 2.0);
  EXPECT_DOUBLE_EQ(p.phase_us[2][1], 1.0);
}

// SMs are swept apart: a block streaming on SM 0 does not cover an idle SM 1. A block that did
// not stamp (an early return: zeros) is left out; one without tiles (no streaming stamps) counts
// as resident but never streaming.
TEST(BlockTrace, SmsApartAndUnstampedBlocksLeftOut) {
  const auto h = entries({{0, 0, 0, 0, 0},              // returned early
                          {1000, 1000, 3000, 3000, 0},  // streams its whole time on SM 0
                          {1000, 0, 0, 3000, 1}});      // no tiles, on SM 1
  const auto p = summarize_phases(h.data(), 3);
  EXPECT_EQ(p.blocks, 2);
  EXPECT_DOUBLE_EQ(p.span_us, 2.0);
  EXPECT_NEAR(p.resident, 1.0, 1e-12);
  EXPECT_NEAR(p.idle_share, 0.5, 1e-12);  // SM 1's 2,000 ns of 4,000
}

TEST(BlockTrace, NothingStamped) {
  const auto h = entries({{0, 0, 0, 0, 0}});
  const auto p = summarize_phases(h.data(), 1);
  EXPECT_EQ(p.blocks, 0);
  EXPECT_EQ(p.span_us, 0.0);
  EXPECT_EQ(p.idle_share, 0.0);
}

}  // namespace
