// What `calibrate --backend cuda` takes from a plan, tested without a GPU: planShapes over the
// lowered Program of the bundled tiny Llama (models/tiny-llama.json: hidden 256, intermediate
// 688, 8 heads of 32, 4 KV heads, vocabulary 2048) at 64 tokens per micro-batch.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "backend_cuda/calibrate.hpp"
#include "core/plan/plan_build.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cuda {
namespace {

using Shape = std::tuple<int64_t, int64_t, int64_t, bool>;  // m, n, k, backward

PlanShapes tinyLlamaShapes(const std::string& attention) {
    core::PlanOverrides o;
    o.model = std::string(SHARDCAST_SOURCE_DIR) + "/models/tiny-llama.json";
    o.nodes = 1;
    o.gpus_per_node = 2;
    o.seq_len = 64;
    o.micro_batch = 1;
    o.attention = attention;
    auto plan = core::buildPlan(o);
    EXPECT_TRUE(plan) << plan.error().message;
    sim::Evaluator evaluator;
    sim::Evaluation evaluation;
    auto evaluated = evaluator.evaluate(*plan, nullptr, {}, evaluation);
    EXPECT_TRUE(evaluated) << evaluated.error().message;
    return planShapes(evaluation.program);
}

std::vector<Shape> asTuples(const PlanShapes& shapes) {
    std::vector<Shape> out;
    for (const sim::GemmPoint& g : shapes.gemms) out.emplace_back(g.m, g.n, g.k, g.backward);
    return out;
}

// Linear layers over T = 64 tokens: forward (T, out, in), dgrad (T, in, out), wgrad (out, in, T)
// (core/lower/lower_segments.cpp); k and v project to 4 x 32 = 128 features.
TEST(CudaCalibrateTest, PlanShapesAreTheLinearLayersOnceEachPass) {
    const std::vector<Shape> shapes = asTuples(tinyLlamaShapes("flash"));
    const std::vector<Shape> expected_subset = {
        {64, 256, 256, false},  {64, 128, 256, false}, {64, 688, 256, false}, {64, 256, 688, false},
        {64, 2048, 256, false}, {64, 256, 688, true},  {64, 688, 256, true},  {64, 256, 2048, true},
        {688, 256, 64, true},   {256, 688, 64, true},  {2048, 256, 64, true}, {128, 256, 64, true}};
    for (const Shape& e : expected_subset) {
        EXPECT_NE(std::find(shapes.begin(), shapes.end(), e), shapes.end())
            << std::get<0>(e) << "x" << std::get<1>(e) << "x" << std::get<2>(e) << (std::get<3>(e) ? " backward" : " forward");
    }
    EXPECT_TRUE(std::is_sorted(shapes.begin(), shapes.end()));
    EXPECT_EQ(std::adjacent_find(shapes.begin(), shapes.end()), shapes.end()) << "each shape once";
}

TEST(CudaCalibrateTest, FlashAttentionGivesItsSequenceAndHeadDim) {
    const PlanShapes shapes = tinyLlamaShapes("flash");
    ASSERT_EQ(shapes.attention.size(), 1u);
    EXPECT_EQ(shapes.attention[0].seq, 64);
    EXPECT_EQ(shapes.attention[0].head_dim, 32);
    EXPECT_DOUBLE_EQ(shapes.attention[0].flops(), 4.0 * 64 * 64 * 32);
}

// nccl-tests' sweep: 1 KiB to 1 GiB by powers of 4 (11 sizes); --quick stops at 16 MiB.
TEST(CudaCalibrateTest, CollectiveSizesAreNcclTestsPowersOfFour) {
    const std::vector<int64_t> full = collectiveSizes(false);
    ASSERT_EQ(full.size(), 11u);
    EXPECT_EQ(full.front(), 1024);
    EXPECT_EQ(full.back(), int64_t{1} << 30);
    for (size_t i = 1; i < full.size(); ++i) EXPECT_EQ(full[i], 4 * full[i - 1]);
    EXPECT_EQ(collectiveSizes(true).back(), int64_t{16} << 20);
}

}  // namespace
}  // namespace shardcast::cuda
