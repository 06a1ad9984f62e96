#include <gtest/gtest.h>

#include "core/model_io.hpp"
#include "simulator/sweep.hpp"

namespace shardcast::sim {
namespace {

SweepResult result(int64_t peak_bytes, double step_s, bool fits = true, bool ok = true) {
    SweepResult r;
    r.ok = ok;
    r.peak_bytes = peak_bytes;
    r.step_s = step_s;
    r.fits = fits;
    return r;
}

TEST(SweepTest, WrapCandidatesFor32Blocks) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok()) << model.error().message;
    ASSERT_EQ(model->blocks.size(), 32u);
    const auto wraps = wrapCandidates(*model);
    // Whole; every k for each distinct ceil(32 / k): k = 31 (2 units), 15 (3), 10 (4), 7 (5),
    // 6 (6), 5 (7), 4 (8), 3 (11), 2 (16); four min-params thresholds; per block.
    ASSERT_EQ(wraps.size(), 15u);
    EXPECT_EQ(wraps[0].kind, core::WrapKind::Whole);
    const std::vector<int64_t> ks{31, 15, 10, 7, 6, 5, 4, 3, 2};
    for (size_t i = 0; i < ks.size(); ++i) {
        EXPECT_EQ(wraps[1 + i].kind, core::WrapKind::EveryK);
        EXPECT_EQ(wraps[1 + i].k, ks[i]);
    }
    const int64_t per_block = model->numParams() / 32;
    const std::vector<int64_t> multiples{8, 4, 2, 1};
    for (size_t i = 0; i < multiples.size(); ++i) {
        EXPECT_EQ(wraps[10 + i].kind, core::WrapKind::MinParams);
        EXPECT_EQ(wraps[10 + i].min_params, multiples[i] * per_block);
    }
    EXPECT_EQ(wraps[14].kind, core::WrapKind::Block);
}

TEST(SweepTest, ParetoFrontKeepsOnlyUndominatedResults) {
    // (peak, step): 0 (10, 5), 1 (20, 3), 2 (15, 6) dominated by 0, 3 (30, 3) no faster than 1,
    // 4 (5, 9), 5 invalid (never on the front).
    const std::vector<SweepResult> results{result(10, 5), result(20, 3), result(15, 6),
                                           result(30, 3), result(5, 9), result(1, 1, true, false)};
    EXPECT_EQ(paretoFront(results), (std::vector<size_t>{4, 0, 1}));
}

TEST(SweepTest, RecommendIsTheFastestThatFits) {
    const std::vector<SweepResult> results{result(10, 5), result(90, 2, false), result(20, 3),
                                           result(1, 1, true, false)};
    EXPECT_EQ(recommend(results), 2);
    EXPECT_EQ(recommend({result(90, 2, false)}), -1);
}

}  // namespace
}  // namespace shardcast::sim
