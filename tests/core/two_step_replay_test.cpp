// TwoStepReplay (core/memory/allocator_replay.hpp): the second step's figures set from the first step's
// where its best-fit decisions prove the second repeats them, on hand-derived tapes. Constants
// from PyTorch's c10/cuda/CUDACachingAllocator.cpp: requests of 10 MiB or more get a segment of
// their size rounded up to 2 MiB; the large pool splits a block when more than 1 MiB remains;
// best fit takes the smallest free block that fits.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/memory/allocator_replay.hpp"
#include "core/memory/caching_allocator.hpp"

namespace shardcast::core {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

AllocOp alloc(int32_t id, int64_t bytes, Stream stream = Stream::Compute) { return AllocOp{bytes, id, AllocOpKind::Allocate, stream}; }
AllocOp release(int32_t id) { return AllocOp{0, id, AllocOpKind::Free, Stream::Compute}; }

struct Steps {
    AllocatorStats stats;
    bool skipped = false;
};

// The steady state (one 40 MiB buffer, id 15) allocated, then two steps of `tape`.
Steps runSteps(const std::vector<AllocOp>& tape, bool shortcut, AllocatorConfig config = {}) {
    CachingAllocatorModel model;
    model.reset(config, 16);
    model.allocate(15, 40 * kMiB, Stream::Compute);
    TwoStepReplay steps;
    steps.run(model, tape, nullptr, shortcut);
    return {model.stats(), steps.secondStepSkipped()};
}

// Both ways: with the proof, and replaying the second step whatever it says; the figures agree.
Steps bothWays(const std::vector<AllocOp>& tape, AllocatorConfig config = {}) {
    const Steps shortcut = runSteps(tape, true, config);
    const Steps replayed = runSteps(tape, false, config);
    EXPECT_FALSE(replayed.skipped);
    EXPECT_EQ(shortcut.stats, replayed.stats);
    return shortcut;
}

// Step 1 makes a 30 MiB and a 50 MiB segment, and frees both: step 2 finds each request's own
// segment cached (30 MiB fits 30 MiB; the 50 MiB one is larger), makes none, and its reserved
// stays at 40 + 30 + 50 = 120 MiB all along.
TEST(TwoStepReplayTest, SecondStepOnCachedSegmentsIsSetFromTheFirst) {
    const std::vector<AllocOp> tape{alloc(0, 30 * kMiB), alloc(1, 50 * kMiB, Stream::AllGather), release(0), release(1)};
    const Steps shortcut = bothWays(tape);
    EXPECT_TRUE(shortcut.skipped);
    const AllocatorStats& s = shortcut.stats;
    EXPECT_EQ(s.peak_reserved_bytes, 120 * kMiB);
    EXPECT_EQ(s.peak_allocated_bytes, 120 * kMiB);          // 40 + 30 + 50 live after the second call
    EXPECT_EQ(s.fragmentation_at_reserved_peak, 0);         // reserved 120 MiB, the most allocated 120 MiB
    EXPECT_EQ(s.max_fragmentation_bytes, 80 * kMiB);         // at the step's start and end: 120 - 40
    EXPECT_EQ(s.reserved_by_stream_at_peak[static_cast<size_t>(Stream::Compute)], 70 * kMiB);
    EXPECT_EQ(s.reserved_by_stream_at_peak[static_cast<size_t>(Stream::AllGather)], 50 * kMiB);
    EXPECT_EQ(s.allocated_by_stream_at_peak[static_cast<size_t>(Stream::AllGather)], 50 * kMiB);
    EXPECT_EQ(s.segments, 3);
    EXPECT_EQ(s.releases, 0);
}

// Step 1: A (100 MiB) makes segment S1 and is freed; B (20 MiB) splits S1, C (80 MiB) takes the
// 80 MiB left, D (90 MiB) finds nothing and makes S2 (90 MiB): reserved 190 MiB. Step 2 starts
// with S1 and S2 cached: B's best fit is now S2 (90 < 100 MiB), leaving 70 MiB; C splits S1
// (100 MiB, 20 left), and D finds nothing of 90 MiB: a third segment, reserved 280 MiB. The proof
// sees the 90 MiB segment made after B's pick, between B's 20 MiB and the 100 MiB it took, and
// replays the step: taking step 1's figures would say 190 MiB.
TEST(TwoStepReplayTest, ALaterSegmentThatFitsBetterSendsTheSecondStepToTheReplay) {
    const std::vector<AllocOp> tape{alloc(0, 100 * kMiB), release(0),   alloc(1, 20 * kMiB), alloc(2, 80 * kMiB),
                                    alloc(3, 90 * kMiB),  release(1),   release(2),          release(3)};
    const Steps shortcut = bothWays(tape);
    EXPECT_FALSE(shortcut.skipped);
    EXPECT_EQ(shortcut.stats.peak_reserved_bytes, (40 + 100 + 90 + 90) * kMiB);
    EXPECT_EQ(shortcut.stats.segments, 4);
}

// The same tape with D of 110 MiB: step 1 makes S2 of 110 MiB, above everything B could take, so
// the proof holds: step 2 repeats step 1 on S1 and S2.
TEST(TwoStepReplayTest, ALaterSegmentLargerThanEveryBlockTakenKeepsTheProof) {
    const std::vector<AllocOp> tape{alloc(0, 100 * kMiB), release(0),   alloc(1, 20 * kMiB), alloc(2, 80 * kMiB),
                                    alloc(3, 110 * kMiB), release(1),   release(2),          release(3)};
    const Steps shortcut = bothWays(tape);
    EXPECT_TRUE(shortcut.skipped);
    EXPECT_EQ(shortcut.stats.peak_reserved_bytes, (40 + 100 + 110) * kMiB);
}

// A first step that meets the device limit releases cached segments, which the proof does not
// cover: the second step is replayed. 40 MiB steady; A (100 MiB) is cached, then B (120 MiB) does
// not fit under 200 MiB until A's segment is released. Step 2: A splits B's 120 MiB segment, B
// takes it whole; reserved 160 MiB.
TEST(TwoStepReplayTest, AReleaseInTheFirstStepSendsTheSecondToTheReplay) {
    const std::vector<AllocOp> tape{alloc(0, 100 * kMiB), release(0), alloc(1, 120 * kMiB), release(1)};
    AllocatorConfig config;
    config.limit_bytes = 200 * kMiB;
    const Steps shortcut = bothWays(tape, config);
    EXPECT_FALSE(shortcut.skipped);
    EXPECT_EQ(shortcut.stats.peak_reserved_bytes, 160 * kMiB);
}

}  // namespace
}  // namespace shardcast::core
