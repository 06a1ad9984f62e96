// PeriodicReplay (core/memory/allocator_replay.hpp) on hand-made tapes whose periods sit on the edges of
// its skip conditions: the skip must give the full replay's figures exactly, and figures worked out
// by hand from the allocator's rules (core/memory/caching_allocator.hpp: segments of 20 MiB under 10 MiB,
// else rounded to 2 MiB; a large-pool remainder stays in its block unless over 1 MiB; best fit,
// lowest address first).
#include "core/memory/allocator_replay.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace shardcast::core {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

AllocOp alloc(int32_t id, int64_t bytes) { return AllocOp{bytes, id, AllocOpKind::Allocate, Stream::Compute}; }
AllocOp release(int32_t id) { return AllocOp{0, id, AllocOpKind::Free, Stream::Compute}; }

struct Tape {
    std::vector<AllocOp> ops;
    std::vector<uint32_t> hints;  // where each period starts
    int32_t ids = 0;
};

struct Result {
    AllocatorStats stats;
    int64_t skipped = 0;
};

// Two steps (the first warms the cache), as MemoryTimer::replayAllocator runs them, or one: full
// and fast must agree on every figure.
Result compare(const Tape& t, const AllocatorConfig& config, int steps = 2) {
    CachingAllocatorModel full;
    full.reset(config, t.ids);
    CachingAllocatorModel fast;
    fast.reset(config, t.ids);
    PeriodicReplay replay;
    replay.prepare(t.ops, t.hints);
    for (int step = 0; step < steps; ++step) {
        if (step > 0) {
            full.resetPeaks();
            fast.resetPeaks();
        }
        replayTapeFull(full, t.ops);
        replay.replay(fast, t.ops);
    }
    EXPECT_EQ(fast.stats(), full.stats());
    return {fast.stats(), replay.lastSkippedPeriods()};
}

// Per period k: a 30 MiB buffer P_k kept to the end (its own segment: 30 MiB is over 10 MiB and a
// multiple of 2 MiB) and an 8 MiB scratch T_k (a 20 MiB segment in period 0, cached after); at the
// end the P's are freed, last first.
Tape forwardLayers(int periods) {
    Tape t;
    for (int k = 0; k < periods; ++k) {
        t.hints.push_back(static_cast<uint32_t>(t.ops.size()));
        t.ops.push_back(alloc(2 * k, 30 * kMiB));
        t.ops.push_back(alloc(2 * k + 1, 8 * kMiB));
        t.ops.push_back(release(2 * k + 1));
    }
    for (int k = periods; k-- > 0;) t.ops.push_back(release(2 * k));
    t.ids = 2 * periods;
    return t;
}

TEST(PeriodicReplayTest, ForwardLayersAreSkippedExactly) {
    const Result r = compare(forwardLayers(12), AllocatorConfig{});
    EXPECT_GT(r.skipped, 0);
    // By hand: 12 segments of 30 MiB and one of 20 MiB; at most 12 x 30 + 8 MiB allocated.
    EXPECT_EQ(r.stats.peak_reserved_bytes, (12 * 30 + 20) * kMiB);
    EXPECT_EQ(r.stats.peak_allocated_bytes, (12 * 30 + 8) * kMiB);
    EXPECT_EQ(r.stats.segments, 13);
    EXPECT_EQ(r.stats.releases, 0);
}

// The same tape against a 300 MiB device, one step from a cold cache: the 10th P fits only once
// the cached 20 MiB segment is released (at 270 + 30 MiB), T_9's new 20 MiB segment does not fit
// and nothing is left to release, so the step goes past the limit. The skip must stop before the
// limit and take up again past it.
TEST(PeriodicReplayTest, TheLimitCutsTheSkip) {
    AllocatorConfig config;
    config.limit_bytes = 300 * kMiB;
    const Result r = compare(forwardLayers(12), config, 1);
    EXPECT_GT(r.stats.releases, 0);
    EXPECT_TRUE(r.stats.out_of_memory);
    // Past the limit the model goes on: 12 P's need 360 MiB whatever else is released.
    EXPECT_GE(r.stats.peak_reserved_bytes, 12 * 30 * kMiB);
}

// Per period k: T_k (1.2 MiB, large pool), Q_k (19 MiB), both freed, then P_k (24.5 MiB: a 26 MiB
// segment whose 1.5 MiB remainder is split off free). Before the first period a cached 20 MiB
// segment. Period 0: T_0 splits the 20 MiB segment, so Q_0 finds no 19 MiB block and gets a new
// 20 MiB segment. From period 1, T_k takes the 1.5 MiB remainder P_0 left (the best fit), and Q_k
// the first 20 MiB segment: no new segment but P's. Period 0 must not be taken as the pattern (its
// layer's remainder is a better fit for T than the block T took); period 1 may.
TEST(PeriodicReplayTest, ALayerBlockThatBecomesTheBestFitIsNotSkippedOver) {
    const int periods = 10;
    Tape t;
    t.ops.push_back(alloc(0, 8 * kMiB));
    t.ops.push_back(release(0));
    for (int k = 0; k < periods; ++k) {
        t.hints.push_back(static_cast<uint32_t>(t.ops.size()));
        const int32_t base = 1 + 3 * k;
        t.ops.push_back(alloc(base, 1228800));  // 1.2 MiB
        t.ops.push_back(alloc(base + 1, 19 * kMiB));
        t.ops.push_back(release(base + 1));
        t.ops.push_back(release(base));
        t.ops.push_back(alloc(base + 2, 24 * kMiB + kMiB / 2));
    }
    for (int k = periods; k-- > 0;) t.ops.push_back(release(3 + 3 * k));
    t.ids = 1 + 3 * periods;
    const Result r = compare(t, AllocatorConfig{});
    EXPECT_GT(r.skipped, 0);
    // By hand: 20 MiB (the first segment) + 20 MiB (Q_0's) + 10 x 26 MiB.
    EXPECT_EQ(r.stats.peak_reserved_bytes, (20 + 20 + periods * 26) * kMiB);
    EXPECT_EQ(r.stats.segments, 2 + periods);
}

// A backward-like run: the forward keeps one 64 MiB buffer per block in its own segment; the
// backward frees them, last first, and each backward period takes a 32 MiB scratch from the
// segment just freed (the best fit, the lowest address among equal ones: the chain walks down).
TEST(PeriodicReplayTest, BackwardChainsWalkingDownAreSkippedExactly) {
    const int blocks = 12;
    Tape t;
    for (int k = 0; k < blocks; ++k) t.ops.push_back(alloc(k, 64 * kMiB));
    for (int k = blocks; k-- > 0;) {
        t.hints.push_back(static_cast<uint32_t>(t.ops.size()));
        t.ops.push_back(release(k));
        const int32_t scratch = blocks + (blocks - 1 - k);
        t.ops.push_back(alloc(scratch, 32 * kMiB));
        t.ops.push_back(release(scratch));
    }
    t.ids = 2 * blocks;
    const Result r = compare(t, AllocatorConfig{});
    EXPECT_GT(r.skipped, 0);
    // By hand: the forward's 12 segments of 64 MiB, reused in the second step; the scratch always
    // finds a freed 64 MiB segment.
    EXPECT_EQ(r.stats.peak_reserved_bytes, blocks * 64 * kMiB);
    EXPECT_EQ(r.stats.peak_allocated_bytes, blocks * 64 * kMiB);
    EXPECT_EQ(r.stats.segments, blocks);
}

}  // namespace
}  // namespace shardcast::core
