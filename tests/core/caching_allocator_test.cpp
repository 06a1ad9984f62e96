// The caching allocator model (core/memory/caching_allocator.hpp) on hand-derived allocation sequences.
// Constants and rules from PyTorch's c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize 512,
// kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge
// 2 MiB (round_size, get_allocation_size, should_split, get_free_block, free_block,
// release_cached_blocks, ExpandableSegment).
#include "core/memory/caching_allocator.hpp"

#include <gtest/gtest.h>

#include "core/memory/timed_memory.hpp"

namespace shardcast::core {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

CachingAllocatorModel fresh(AllocatorConfig config = {}, int32_t buffers = 16) {
    CachingAllocatorModel m;
    m.reset(config, buffers);
    return m;
}

TEST(CachingAllocatorTest, RoundsToFiveHundredTwelveBytes) {
    EXPECT_EQ(CachingAllocatorModel::roundSize(1), 512);
    EXPECT_EQ(CachingAllocatorModel::roundSize(512), 512);
    EXPECT_EQ(CachingAllocatorModel::roundSize(513), 1024);
    // One byte: a 512-byte block in a new 2 MiB small-pool segment.
    CachingAllocatorModel m = fresh();
    m.allocate(0, 1, Stream::Compute);
    EXPECT_EQ(m.stats().allocated_bytes, 1);
    EXPECT_EQ(m.stats().reserved_bytes, 2 * kMiB);
    EXPECT_EQ(m.stats().segments, 1);
}

TEST(CachingAllocatorTest, SegmentSizesBySizeClass) {
    EXPECT_EQ(CachingAllocatorModel::segmentSize(512), 2 * kMiB);         // small: kSmallBuffer
    EXPECT_EQ(CachingAllocatorModel::segmentSize(1 * kMiB), 2 * kMiB);    // kSmallSize is still small
    EXPECT_EQ(CachingAllocatorModel::segmentSize(1 * kMiB + 512), 20 * kMiB);  // under 10 MiB: kLargeBuffer
    EXPECT_EQ(CachingAllocatorModel::segmentSize(5 * kMiB), 20 * kMiB);
    EXPECT_EQ(CachingAllocatorModel::segmentSize(10 * kMiB), 10 * kMiB);  // kMinLargeAlloc: rounded to 2 MiB
    EXPECT_EQ(CachingAllocatorModel::segmentSize(30 * kMiB), 30 * kMiB);
    EXPECT_EQ(CachingAllocatorModel::segmentSize(30 * kMiB + 512), 32 * kMiB);
}

TEST(CachingAllocatorTest, SecondSmallRequestSplitsTheSegment) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 1000, Stream::Compute);        // 1,024 B block of a new 2 MiB segment
    m.allocate(1, 1 * kMiB, Stream::Compute);    // 1,048,576 B from the remaining 2,096,128 B: split
    EXPECT_EQ(m.stats().reserved_bytes, 2 * kMiB);
    EXPECT_EQ(m.stats().segments, 1);
    // Left: 2,097,152 - 1,024 - 1,048,576 = 1,047,552 B, short of another 1 MiB: a second segment.
    m.allocate(2, 1 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 4 * kMiB);
    EXPECT_EQ(m.stats().segments, 2);
    // 1,047,552 B (the best fit) take a 400 KiB (409,600 B) request: no third segment.
    m.allocate(3, 400 * kKiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 4 * kMiB);
}

TEST(CachingAllocatorTest, MidSizedRequestsShareATwentyMebibyteSegment) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 5 * kMiB, Stream::Compute);  // new kLargeBuffer segment, split: 15 MiB left
    EXPECT_EQ(m.stats().reserved_bytes, 20 * kMiB);
    EXPECT_EQ(m.stats().fragmentation_at_reserved_peak, 15 * kMiB);
    m.allocate(1, 5 * kMiB, Stream::Compute);  // 10 MiB left
    m.allocate(2, 5 * kMiB, Stream::Compute);  // 5 MiB left
    m.allocate(3, 5 * kMiB, Stream::Compute);  // exact fit
    EXPECT_EQ(m.stats().reserved_bytes, 20 * kMiB);
    m.allocate(4, 5 * kMiB, Stream::Compute);  // full: a second 20 MiB segment
    EXPECT_EQ(m.stats().reserved_bytes, 40 * kMiB);
    EXPECT_EQ(m.stats().peak_reserved_bytes, 40 * kMiB);
    EXPECT_EQ(m.stats().fragmentation_at_reserved_peak, 40 * kMiB - 25 * kMiB);
}

TEST(CachingAllocatorTest, LargeRequestGetsASegmentRoundedToTwoMebibytes) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
    m.allocate(1, 30 * kMiB + 1, Stream::Compute);  // 30 MiB + 512 B rounds to a 32 MiB segment
    EXPECT_EQ(m.stats().reserved_bytes, 62 * kMiB);
    EXPECT_EQ(m.stats().allocated_bytes, 60 * kMiB + 1);
}

TEST(CachingAllocatorTest, FreedBlockIsReusedOnItsStream) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.free(0);
    EXPECT_EQ(m.stats().allocated_bytes, 0);
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);  // cached, not returned to CUDA
    m.allocate(1, 30 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
    m.free(1);
    m.allocate(2, 25 * kMiB, Stream::Compute);  // best fit in the 30 MiB block, split: 5 MiB > 1 MiB left
    m.allocate(3, 4 * kMiB, Stream::Compute);   // fits the 5 MiB remainder
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
}

// Best fit across the model's size classes (4 per power of two): free blocks of 48, 40 and
// 36 MiB (35 MiB rounds to a 36 MiB segment, its 1 MiB remainder not split off). 37 MiB finds
// nothing in its own class [32, 40) MiB and takes the 40 MiB block from the next (split: 3 MiB
// > kSmallSize left); 36 MiB takes the 36 MiB block of its own class; 41 MiB skips the empty
// [40, 48) class for the 48 MiB block; 3 MiB takes the remainder. No new segment.
TEST(CachingAllocatorTest, BestFitAcrossSizeClasses) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 48 * kMiB, Stream::Compute);
    m.allocate(1, 40 * kMiB, Stream::Compute);
    m.allocate(2, 35 * kMiB, Stream::Compute);
    for (int32_t b = 0; b < 3; ++b) m.free(b);
    EXPECT_EQ(m.stats().reserved_bytes, 124 * kMiB);
    m.allocate(3, 37 * kMiB, Stream::Compute);
    m.allocate(4, 36 * kMiB, Stream::Compute);
    m.allocate(5, 41 * kMiB, Stream::Compute);
    m.allocate(6, 3 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 124 * kMiB);
    EXPECT_EQ(m.stats().segments, 3);
    // Nothing is left: one more byte needs a new 2 MiB small-pool segment.
    m.allocate(7, 1, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 126 * kMiB);
}

TEST(CachingAllocatorTest, FreeBlockOfAnotherStreamIsNotReused) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.free(0);
    m.allocate(1, 30 * kMiB, Stream::AllGather);  // the compute stream's cached block is not its own
    EXPECT_EQ(m.stats().reserved_bytes, 60 * kMiB);
    EXPECT_EQ(m.stats().segments, 2);
    EXPECT_EQ(m.stats().reserved_by_stream[static_cast<size_t>(Stream::Compute)], 30 * kMiB);
    EXPECT_EQ(m.stats().reserved_by_stream[static_cast<size_t>(Stream::AllGather)], 30 * kMiB);
}

TEST(CachingAllocatorTest, FreedNeighboursCoalesce) {
    CachingAllocatorModel m = fresh();
    // One 20 MiB segment: [a 5][b 5][c 5][free 5].
    m.allocate(0, 5 * kMiB, Stream::Compute);
    m.allocate(1, 5 * kMiB, Stream::Compute);
    m.allocate(2, 5 * kMiB, Stream::Compute);
    m.free(0);
    m.free(1);  // merges with a: [free 10][c 5][free 5]
    // 10 MiB fits only the merged block; without merging it would need a new 10 MiB segment.
    m.allocate(3, 10 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 20 * kMiB);
    EXPECT_EQ(m.stats().segments, 1);
}

TEST(CachingAllocatorTest, UnsplitRemainderOfALargeBlockStaysInIt) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.free(0);
    // 29.5 MiB in the 30 MiB block leaves 512 KiB: not > kSmallSize, so the block is not split...
    m.allocate(1, 30 * kMiB - 512 * kKiB, Stream::Compute);
    // ...so a 1.5 MiB request cannot use the 512 KiB: a new 20 MiB segment.
    m.allocate(2, 3 * kMiB / 2, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 50 * kMiB);
}

TEST(CachingAllocatorTest, OversizeBlocksAreNotSplitWithMaxSplitSize) {
    AllocatorConfig config;
    config.max_split_size = 16 * kMiB;  // max_split_size_mb:16
    CachingAllocatorModel m = fresh(config);
    m.allocate(0, 40 * kMiB, Stream::Compute);
    m.free(0);
    // 8 MiB < max_split_size may not take a block >= max_split_size: a new 20 MiB segment.
    m.allocate(1, 8 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 60 * kMiB);
    // 18 MiB >= max_split_size, but the 40 MiB block is >= 18 + 20 MiB (kLargeBuffer): not used.
    m.allocate(2, 18 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 78 * kMiB);
    m.free(2);
    // 30 MiB takes the 40 MiB block whole (40 < 30 + 20), without a split: a 12 MiB request then
    // can use neither its other 10 MiB nor the oversize 18 MiB block, and takes the 20 MiB
    // segment's free 12 MiB.
    m.allocate(3, 30 * kMiB, Stream::Compute);
    m.allocate(4, 12 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().reserved_bytes, 78 * kMiB);
    m.allocate(5, 9 * kMiB, Stream::Compute);  // 18 MiB block is oversize; 40 MiB one is taken: new 20 MiB
    EXPECT_EQ(m.stats().reserved_bytes, 98 * kMiB);

    // The default (unlimited) splits the cached 40 MiB block for the 8 MiB request.
    CachingAllocatorModel d = fresh();
    d.allocate(0, 40 * kMiB, Stream::Compute);
    d.free(0);
    d.allocate(1, 8 * kMiB, Stream::Compute);
    EXPECT_EQ(d.stats().reserved_bytes, 40 * kMiB);
}

TEST(CachingAllocatorTest, ExpandableSegmentsGrowByPages) {
    AllocatorConfig config;
    config.mode = AllocatorMode::Expandable;
    CachingAllocatorModel m = fresh(config);
    m.allocate(0, 30 * kMiB, Stream::Compute);  // large pool, 20 MiB pages: 2 pages mapped
    EXPECT_EQ(m.stats().reserved_bytes, 40 * kMiB);
    m.allocate(1, 5 * kMiB, Stream::Compute);   // the 10 MiB left at the end
    EXPECT_EQ(m.stats().reserved_bytes, 40 * kMiB);
    m.allocate(2, 15 * kMiB, Stream::Compute);  // 5 MiB left + one more page
    EXPECT_EQ(m.stats().reserved_bytes, 60 * kMiB);
    EXPECT_EQ(m.stats().segments, 1);           // one growing segment
    m.free(0);
    m.allocate(3, 25 * kMiB, Stream::Compute);  // best fit in the freed 30 MiB
    EXPECT_EQ(m.stats().reserved_bytes, 60 * kMiB);
    m.allocate(4, 1, Stream::Compute);          // small pool: its own segment, 2 MiB pages
    EXPECT_EQ(m.stats().reserved_bytes, 62 * kMiB);
    m.allocate(5, 1 * kMiB + 512, Stream::AllGather);  // another stream: its own segment
    EXPECT_EQ(m.stats().reserved_bytes, 82 * kMiB);
    EXPECT_EQ(m.stats().segments, 3);

    // The same three requests without expandable segments: a 30 MiB segment, a 20 MiB one for the
    // 5 MiB request, whose 15 MiB remainder takes the 15 MiB request.
    CachingAllocatorModel c = fresh();
    c.allocate(0, 30 * kMiB, Stream::Compute);
    c.allocate(1, 5 * kMiB, Stream::Compute);
    c.allocate(2, 15 * kMiB, Stream::Compute);
    EXPECT_EQ(c.stats().reserved_bytes, 50 * kMiB);
    EXPECT_EQ(c.stats().segments, 2);
}

TEST(CachingAllocatorTest, ReleasedTailServesScratchAndComesBack) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.releaseTail(0, 10 * kMiB);                // saved tensors dropped op by op
    EXPECT_EQ(m.stats().allocated_bytes, 20 * kMiB);
    m.allocate(1, 8 * kMiB, Stream::Compute);   // the scratch lands in the released 10 MiB
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
    m.free(1);
    m.restoreTail(0);
    EXPECT_EQ(m.stats().allocated_bytes, 30 * kMiB);
    m.free(0);
    m.allocate(2, 30 * kMiB, Stream::Compute);  // the block is whole again
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
}

TEST(CachingAllocatorTest, ReleasesCachedSegmentsBeforeFailing) {
    AllocatorConfig config;
    config.limit_bytes = 50 * kMiB;
    CachingAllocatorModel m = fresh(config);
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.free(0);
    // 30 + 30 MiB would pass 50 MiB: the free compute-stream segment is released, then it fits.
    m.allocate(1, 30 * kMiB, Stream::AllGather);
    EXPECT_EQ(m.stats().reserved_bytes, 30 * kMiB);
    EXPECT_EQ(m.stats().releases, 1);
    EXPECT_FALSE(m.stats().out_of_memory);
    m.allocate(2, 30 * kMiB, Stream::AllGather);  // nothing left to release: out of memory
    EXPECT_TRUE(m.stats().out_of_memory);
    EXPECT_EQ(m.stats().reserved_bytes, 60 * kMiB);
}

TEST(CachingAllocatorTest, ResetPeaksKeepsTheCache) {
    CachingAllocatorModel m = fresh();
    m.allocate(0, 30 * kMiB, Stream::Compute);
    m.free(0);
    m.resetPeaks();
    EXPECT_EQ(m.stats().peak_allocated_bytes, 0);
    EXPECT_EQ(m.stats().peak_reserved_bytes, 30 * kMiB);
    m.allocate(0, 10 * kMiB, Stream::Compute);
    EXPECT_EQ(m.stats().peak_allocated_bytes, 10 * kMiB);
    EXPECT_EQ(m.stats().max_fragmentation_bytes, 30 * kMiB);  // all cached before the allocation
    // Reserved stays at its 30 MiB peak; the most allocated meanwhile is 10 MiB.
    EXPECT_EQ(m.stats().fragmentation_at_reserved_peak, 20 * kMiB);
}

// A forward saves three tensors (6, 6 and 12 MiB: one buffer of 24 MiB); its backward has
// released 14 MiB of them at its peak, where it needs 12 MiB of scratch; then it frees them.
// Tasks run one after another on the compute stream.
struct TwoTaskProgram {
    Program program;
    Timeline timeline;
    explicit TwoTaskProgram(bool per_tensor) {
        Program& p = program;
        p.buffer_count = 2;
        p.mem = {
            MemEvent{24 * kMiB, MemCategory::Activation, -1, 0, Stream::Compute},   // FWD end: saved
            MemEvent{-14 * kMiB, MemCategory::Activation, -1, 0, Stream::Compute},  // BWD peak: released
            MemEvent{12 * kMiB, MemCategory::Temp, -1, 1, Stream::Compute},          // BWD peak: scratch
            MemEvent{-24 * kMiB, MemCategory::Activation, -1, 0, Stream::Compute},  // BWD end: free
        };
        p.tasks.resize(2);
        p.tasks[0].kind = TaskKind::Forward;
        p.tasks[0].mem_end = Span{0, 1};
        p.tasks[1].kind = TaskKind::Backward;
        p.tasks[1].mem_peak = Span{1, 2};
        p.tasks[1].mem_end = Span{3, 1};
        if (per_tensor) {
            p.tensor_bytes = {6 * kMiB, 6 * kMiB, 12 * kMiB};
            p.buffer_tensors = {Span{0, 3}, Span{}};
        }
        timeline.tasks = {TaskTime{0, 10, Stream::Compute}, TaskTime{10, 20, Stream::Compute}};
        timeline.step_ns = 20;
    }
};

ReservedMemory replay(TwoTaskProgram& t) {
    MemoryTimer timer;
    TimedMemory timed;
    timer.compute(t.program, t.timeline, timed);
    CachingAllocatorModel model;
    ReservedMemory out;
    timer.replayAllocator(t.program, t.timeline, AllocatorConfig{}, model, out);
    return out;
}

TEST(CachingAllocatorReplayTest, SavedTensorsAreAllocatedOneByOne) {
    TwoTaskProgram t(true);
    // Step 1 (cold): 6 MiB -> a new 20 MiB segment S1 (kLargeBuffer), split [6][14 free]; 6 MiB ->
    // the 14 MiB block, split [6][6][8 free]; 12 MiB fits no free block -> a 12 MiB segment S2:
    // 32 MiB reserved. At the peak the backward has freed the last tensor (12 MiB <= 14 MiB
    // released; with the next 6 MiB it would be 18), and the 12 MiB scratch takes S2 again. The
    // free returns the two 6 MiB tensors: S1 is one free 20 MiB block.
    // Step 2 (warm, reported): 6 MiB -> best fit S2's 12 MiB, split [6][6 free]; 6 MiB -> that
    // 6 MiB; 12 MiB -> S1, split [12][8 free]; the scratch again takes the freed 12 MiB. No new
    // segment: reserved stays 32 MiB, allocated peaks at 24 MiB, 8 MiB apart.
    const ReservedMemory r = replay(t);
    EXPECT_EQ(r.stats.peak_reserved_bytes, 32 * kMiB);
    EXPECT_EQ(r.stats.peak_allocated_bytes, 24 * kMiB);
    EXPECT_EQ(r.stats.fragmentation_at_reserved_peak, 8 * kMiB);
    EXPECT_EQ(r.stats.segments, 2);
    EXPECT_EQ(r.stats.allocated_bytes, 0);  // every byte the step allocates is freed

    // The same buffer as one 24 MiB block: one 24 MiB segment; its released 14 MiB tail takes the
    // 12 MiB scratch (a 2 MiB remainder > kSmallSize is split off): 24 MiB reserved.
    TwoTaskProgram one(false);
    const ReservedMemory b = replay(one);
    EXPECT_EQ(b.stats.peak_reserved_bytes, 24 * kMiB);
    EXPECT_EQ(b.stats.segments, 1);
}

// FSDP2's reduce-scatter input as the replay sees it: a reduce-scatter task (its own stream)
// whose 40 MiB input block the host allocated on the compute stream (MemEvent::stream) and frees
// at the task's end; then a forward on the compute stream allocates 40 MiB.
ReservedMemory replayCrossStream(Stream input_owner) {
    Program p;
    p.buffer_count = 2;
    p.mem = {
        MemEvent{40 * kMiB, MemCategory::ReduceScatter, -1, 0, input_owner},   // RS start: input
        MemEvent{-40 * kMiB, MemCategory::ReduceScatter, -1, 0, input_owner},  // RS end: freed
        MemEvent{40 * kMiB, MemCategory::Activation, -1, 1, Stream::Compute},   // FWD start
        MemEvent{-40 * kMiB, MemCategory::Activation, -1, 1, Stream::Compute},  // FWD end
    };
    p.tasks.resize(2);
    p.tasks[0].kind = TaskKind::ReduceScatter;
    p.tasks[0].stream = Stream::ReduceScatter;
    p.tasks[0].mem_start = Span{0, 1};
    p.tasks[0].mem_end = Span{1, 1};
    p.tasks[1].kind = TaskKind::Forward;
    p.tasks[1].mem_start = Span{2, 1};
    p.tasks[1].mem_end = Span{3, 1};
    Timeline timeline;
    timeline.tasks = {TaskTime{0, 10, Stream::ReduceScatter}, TaskTime{10, 20, Stream::Compute}};
    timeline.step_ns = 20;
    MemoryTimer timer;
    TimedMemory timed;
    timer.compute(p, timeline, timed);
    CachingAllocatorModel model;
    ReservedMemory out;
    timer.replayAllocator(p, timeline, AllocatorConfig{}, model, out);
    return out;
}

TEST(CachingAllocatorReplayTest, BlockFreedOnOneStreamIsNotReusedByAnother) {
    // Owned by the compute stream: the forward's 40 MiB takes the freed 40 MiB block (exact fit),
    // one 40 MiB segment (a request of 10 MiB or more gets its size rounded to 2 MiB).
    const ReservedMemory same = replayCrossStream(Stream::Compute);
    EXPECT_EQ(same.stats.peak_reserved_bytes, 40 * kMiB);
    EXPECT_EQ(same.stats.segments, 1);
    EXPECT_EQ(same.stats.reserved_by_stream[static_cast<size_t>(Stream::Compute)], 40 * kMiB);
    EXPECT_EQ(same.stats.reserved_by_stream[static_cast<size_t>(Stream::ReduceScatter)], 0);
    // Owned by the reduce-scatter stream (as the task's own stream would have it): the compute
    // stream cannot take that cached block, so it gets a second 40 MiB segment: 80 MiB reserved
    // for 40 MiB ever allocated at once, half of it idle in the other stream's pool.
    const ReservedMemory other = replayCrossStream(Stream::ReduceScatter);
    EXPECT_EQ(other.stats.peak_reserved_bytes, 80 * kMiB);
    EXPECT_EQ(other.stats.peak_allocated_bytes, 40 * kMiB);
    EXPECT_EQ(other.stats.segments, 2);
    EXPECT_EQ(other.stats.reserved_by_stream[static_cast<size_t>(Stream::Compute)], 40 * kMiB);
    EXPECT_EQ(other.stats.reserved_by_stream[static_cast<size_t>(Stream::ReduceScatter)], 40 * kMiB);
}

}  // namespace
}  // namespace shardcast::core
