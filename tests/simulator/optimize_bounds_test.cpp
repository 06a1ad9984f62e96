// The optimizer's bounds (search/optimize_bounds.hpp) on hand-built Programs whose figures are
// worked out on paper, and their combination.
#include <gtest/gtest.h>

#include "search/optimize_bounds.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/simulator.hpp"
#include "tests/simulator/program_builder.hpp"

namespace shardcast::sim {
namespace {

using core::MemCategory;
using core::MemEvent;
using core::Stream;
using core::TaskKind;
using testing::kMs;
using testing::kTwoMsFlops;
using testing::ProgramBuilder;
using testing::roundProfile;

MemEvent ev(int64_t bytes, MemCategory c, int32_t buffer, Stream s = Stream::Compute, int32_t timed_after = -1) {
    return MemEvent{bytes, c, timed_after, buffer, s};
}

// One micro-batch: forward f0 saves 100 B; a copy-out makes 50 B of unsharded parameters; forward
// f1 peaks 30 B of scratch and saves 200 B; backward b1 peaks 40 B of Temp, frees f1's 200 B and
// makes 60 B of gradient; the reduce-scatter (after b1) frees the gradient and the parameters;
// backward b0 frees f0's 100 B.
ProgramBuilder memoryProgram() {
    ProgramBuilder b(2);
    const int32_t f0 = b.compute(TaskKind::Forward, 1, 0);
    b.memEnd(f0, {ev(100, MemCategory::Activation, 0)});
    const int32_t copy_out = b.compute(TaskKind::CopyOut, 1, 0);
    b.memStart(copy_out, {ev(50, MemCategory::UnshardedParam, 1)});
    const int32_t f1 = b.compute(TaskKind::Forward, 1, 0);
    b.memPeak(f1, {ev(30, MemCategory::Activation, -1)});
    b.memEnd(f1, {ev(200, MemCategory::Activation, 2)});
    const int32_t b1 = b.compute(TaskKind::Backward, 1, 0);
    b.memPeak(b1, {ev(40, MemCategory::Temp, -1)});
    b.memEnd(b1, {ev(-200, MemCategory::Activation, 2), ev(60, MemCategory::UnshardedGrad, 3)});
    const int32_t rs = b.add(TaskKind::ReduceScatter, Stream::ReduceScatter, 1, {b1});
    b.memStart(rs, {ev(-60, MemCategory::UnshardedGrad, 3, Stream::Compute), ev(-50, MemCategory::UnshardedParam, 1)});
    const int32_t b0 = b.compute(TaskKind::Backward, 1, 0);
    b.memEnd(b0, {ev(-100, MemCategory::Activation, 0)});
    b.program().buffer_count = 4;
    b.program().micro_batches = 1;
    return b;
}

TEST(BoundAnalyzerTest, ActivationHighWaterAndBytesLiveAtEachKernelPeak) {
    ProgramBuilder b = memoryProgram();
    const HardwareProfile profile = roundProfile();
    const CostModel cost(profile);
    BoundAnalyzer analyzer;
    const GroupBoundPart g = analyzer.groupPart(b.program(), cost);
    // Activation in compute order: +100, (peak +30: 130), +200 = 300, -200, -100.
    EXPECT_EQ(g.activation_peak_bytes, 300);
    // Points f0, f1, b1, b0: Activation live at each peak plus its transient bytes:
    // f0 nothing yet; f1 100 + 30; b1 100 + 200 + 40 (its 200 B are freed at its end); b0 100.
    EXPECT_EQ(g.at_kernels, (std::vector<int64_t>{0, 130, 340, 100}));
    const ShardingBoundPart s = analyzer.shardingPart(b.program(), cost, profile);
    // The 50 B of parameters are live from the copy-out until the reduce-scatter, which starts
    // after b1 ends: live at f1 and b1. The gradient is made at b1's end: live at no peak.
    EXPECT_EQ(s.at_kernels, (std::vector<int64_t>{0, 50, 50, 0}));
    // initial 0 + the largest of 300 and (0, 180, 390, 100).
    EXPECT_EQ(combineBounds(g, s, profile).peak_bytes, 390);
}

TEST(BoundAnalyzerTest, FreesDeferredToAnotherTaskAreNotCountedAsLive) {
    ProgramBuilder b(2);
    const int32_t f0 = b.compute(TaskKind::Forward, 1, 0);
    b.memStart(f0, {ev(70, MemCategory::AllGather, 0), ev(40, MemCategory::Temp, 1)});
    const int32_t f1 = b.compute(TaskKind::Forward, 1, 0);
    // Buffer 0 is freed with f1's start events in the host's view, on the timeline when f0 ends;
    // buffer 1 at f1's start.
    b.memStart(f1, {ev(-70, MemCategory::AllGather, 0, Stream::Compute, f0), ev(-40, MemCategory::Temp, 1)});
    b.program().buffer_count = 2;
    b.program().micro_batches = 1;
    const HardwareProfile profile = roundProfile();
    BoundAnalyzer analyzer;
    const ShardingBoundPart s = analyzer.shardingPart(b.program(), CostModel(profile), profile);
    // Where a deferred free lands depends on the timeline: the bound leaves such a buffer out, even
    // at f0's peak where it is live. Buffer 1 counts at f0 only.
    EXPECT_EQ(s.at_kernels, (std::vector<int64_t>{40, 0}));
}

// all-gather -> forward (2 ms) -> backward (4 ms) -> reduce-scatter -> optimizer step (1 ms of
// HBM traffic). Nothing overlaps: the step is the chain, and the chain bound is the step less
// the slack (1e-6 of it plus 1 us).
TEST(BoundAnalyzerTest, ChainOfHeadKernelsAndTailBoundsASerialStep) {
    ProgramBuilder b(2);
    const int32_t ag = b.collective(TaskKind::AllGather, 1, 160'000'000, 2, 1);
    const int32_t fwd = b.compute(TaskKind::Forward, 1, kTwoMsFlops, {ag});
    const int32_t bwd = b.compute(TaskKind::Backward, 1, 2 * kTwoMsFlops, {fwd});
    const int32_t rs = b.collective(TaskKind::ReduceScatter, 1, 160'000'000, 2, 1, {bwd});
    const int32_t opt = b.compute(TaskKind::OptimizerStep, -1, 0, {rs});
    b.task(opt).hbm_bytes = 1'000'000'000;  // 1 ms at 1e12 B/s
    b.program().micro_batches = 1;
    const HardwareProfile profile = roundProfile();
    const CostModel cost(profile);
    const int64_t collective_ns = cost.durationNs(b.task(ag), b.program());
    ASSERT_GT(collective_ns, 0);
    BoundAnalyzer analyzer;
    const GroupBoundPart g = analyzer.groupPart(b.program(), cost);
    const ShardingBoundPart s = analyzer.shardingPart(b.program(), cost, profile);
    EXPECT_EQ(g.kernels_ns, 6 * kMs);
    EXPECT_EQ(s.other_compute_ns, 1 * kMs);
    EXPECT_EQ(s.between_kernels_ns, 0);
    EXPECT_EQ(s.head_ns, collective_ns);
    EXPECT_EQ(s.tail_ns, collective_ns + 1 * kMs);
    EXPECT_EQ(s.collectives_ns, collective_ns);

    Simulator sim(profile);
    core::Timeline timeline;
    sim.run(b.program(), timeline);
    const int64_t step = 2 * collective_ns + 7 * kMs;
    EXPECT_EQ(timeline.step_ns, step);
    const auto chain = static_cast<double>(step);
    EXPECT_EQ(combineBounds(g, s, profile).step_ns, static_cast<int64_t>(chain * (1.0 - 1e-6)) - 1000);
}

// W + |U| (1 - 1/f): 10 ms of kernels, 1 ms of other compute, 4 ms of collectives at f = 1.25 give
// 11 + 4 x 0.2 = 11.8 ms; the chain 0.5 + 10 + 0.3 + 0.2 = 11 ms, the chain with contention
// 10.3 + 0.8 + 0.7 / 1.25 = 11.66 ms and the busiest stream 5 ms are smaller. Without contention (f < 1) there is no time bound.
TEST(CombineBoundsTest, TakesTheLargestProvenBound) {
    GroupBoundPart g;
    g.kernels_ns = 10 * kMs;
    g.activation_peak_bytes = 5;
    g.at_kernels = {1, 4, 2};
    ShardingBoundPart s;
    s.other_compute_ns = 1 * kMs;
    s.between_kernels_ns = 300'000;
    s.head_ns = 500'000;
    s.tail_ns = 200'000;
    s.collectives_ns = 4 * kMs;
    s.stream_busy_ns = 5 * kMs;
    s.initial_bytes = 10;
    s.at_kernels = {3, 1, 5};
    HardwareProfile profile = roundProfile();
    profile.overlap_compute_slowdown = 1.25;
    const ConfigurationBounds b = combineBounds(g, s, profile);
    EXPECT_EQ(b.step_ns, static_cast<int64_t>(11.8e6 * (1.0 - 1e-6)) - 1000);
    EXPECT_EQ(b.peak_bytes, 10 + 7);  // max(5, 1 + 3, 4 + 1, 2 + 5)
    // A longer tail: the chain gives 0.5 + 10 + 0.3 + 2 = 12.8 ms, the chain with contention in the
    // middle 10.3 + 4 x 0.2 + (0.5 + 2) / 1.25 = 13.1 ms.
    s.tail_ns = 2 * kMs;
    EXPECT_EQ(combineBounds(g, s, profile).step_ns, static_cast<int64_t>(13.1e6 * (1.0 - 1e-6)) - 1000);
    s.collectives_ns = 0;  // no collectives: the plain chain
    EXPECT_EQ(combineBounds(g, s, profile).step_ns, static_cast<int64_t>(12.8e6 * (1.0 - 1e-6)) - 1000);
    s.collectives_ns = 4 * kMs;
    s.at_kernels = {3, 1};  // points that do not match: the high-water mark only
    EXPECT_EQ(combineBounds(g, s, profile).peak_bytes, 10 + 5);
    profile.overlap_compute_slowdown = 0.9;
    EXPECT_EQ(combineBounds(g, s, profile).step_ns, 0);
}

}  // namespace
}  // namespace shardcast::sim
