// core::reservedFloorBytes on hand-made Programs and timed figures: each of its two bounds
// worked out by hand (the argument is in core/memory/reserved_floor.hpp).
#include <gtest/gtest.h>

#include "core/memory/reserved_floor.hpp"

namespace shardcast::core {
namespace {

using C = MemCategory;

// Compute stream: ShardedParam 100 and OptState 200 in the steady state, Activation allocated on
// it. AllGather stream: the AllGather category. Temp on both streams. Runtime Overhead 50.
struct Case {
    Program program;
    TimedMemory timed;
};

Case twoStreams(int64_t activation_max, int64_t temp_at_peak) {
    Case c;
    c.program.initial[index(C::ShardedParam)] = 100;
    c.program.initial[index(C::OptState)] = 200;
    c.program.initial[index(C::RuntimeOverhead)] = 50;
    c.program.mem.push_back({.bytes = 300, .category = C::Activation, .stream = Stream::Compute});
    c.program.mem.push_back({.bytes = 80, .category = C::AllGather, .stream = Stream::AllGather});
    c.program.mem.push_back({.bytes = -80, .category = C::AllGather, .stream = Stream::AllGather});
    c.program.mem.push_back({.bytes = 40, .category = C::Temp, .stream = Stream::Compute});
    c.program.mem.push_back({.bytes = 40, .category = C::Temp, .stream = Stream::AllGather});
    // A free on a third stream does not make a category that stream's.
    c.program.mem.push_back({.bytes = -40, .category = C::Activation, .stream = Stream::ReduceScatter});
    auto& at = c.timed.at_peak;
    at[index(C::ShardedParam)] = 100;
    at[index(C::OptState)] = 200;
    at[index(C::Activation)] = 300;
    at[index(C::AllGather)] = 30;
    at[index(C::Temp)] = temp_at_peak;
    at[index(C::RuntimeOverhead)] = 50;
    for (int64_t b : at) c.timed.peak_bytes += b;
    auto& mx = c.timed.max_per_category;
    mx = at;
    mx[index(C::Activation)] = activation_max;
    mx[index(C::AllGather)] = 120;
    return c;
}

TEST(ReservedFloorTest, SumOfEachStreamsMostHeldWins) {
    // Compute: its own categories at the peak 100 + 200 + 300 = 600, but Activation alone reaches
    // 700 at another moment: L = 700. AllGather: 30 at the peak, 120 at most: L = 120. Temp (both
    // streams) bounds nothing alone. Sum: 50 + 700 + 120 = 870. From the peak: A = 50 + 600 + 30 +
    // 40 = 720, the AllGather stream holds at most U = 30 + 40 = 70 then, so 720 + (120 - 70) = 770.
    const Case c = twoStreams(700, 40);
    EXPECT_EQ(c.timed.peak_bytes, 720);
    EXPECT_EQ(reservedFloorBytes(c.program, c.timed), 870);
}

TEST(ReservedFloorTest, AllocatedPeakPlusWhatAnotherStreamHeldEarlierWins) {
    // Temp holds 400 at the peak, on either stream: A = 50 + 600 + 30 + 400 = 1080, and the
    // AllGather stream may hold U = 30 + 400 >= its L = 120, so the peak bound is 1080. The sum of
    // the streams: 50 + max(600, 300) + 120 = 770.
    Case c = twoStreams(300, 400);
    EXPECT_EQ(c.timed.peak_bytes, 1080);
    EXPECT_EQ(reservedFloorBytes(c.program, c.timed), 1080);
    // With Temp only on the compute stream, the AllGather stream holds 30 at the peak and 120
    // earlier: 1080 + 90; and the compute stream's own at the peak 1000: 50 + 1000 + 120 = 1170.
    c.program.mem[4].stream = Stream::Compute;
    EXPECT_EQ(reservedFloorBytes(c.program, c.timed), 1170);
}

}  // namespace
}  // namespace shardcast::core
