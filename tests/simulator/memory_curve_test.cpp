#include "core/memory/timed_memory.hpp"

#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "program_builder.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/simulator.hpp"

namespace shardcast::sim {
namespace {

using core::MemCategory;
using core::Stream;
using core::TaskKind;
using testing::kMs;
using testing::kTwoMsFlops;
using testing::ProgramBuilder;
using testing::roundProfile;

constexpr int64_t kGiB = core::kGiB;

// A forward (2 ms) holding 10 GiB of activations while it runs, and an all-gather (1 ms, on its own
// stream) holding a 5 GiB buffer while it runs. `after_forward`: the all-gather waits for it.
ProgramBuilder twoStreams(bool after_forward) {
    ProgramBuilder b;
    const int32_t f = b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    b.memStart(f, {{10 * kGiB, MemCategory::Activation}});
    b.memEnd(f, {{-10 * kGiB, MemCategory::Activation}});
    const int32_t ag = after_forward ? b.collective(TaskKind::AllGather, 2, 160'000'000, 2, 1, {f})
                                     : b.collective(TaskKind::AllGather, 2, 160'000'000, 2, 1);
    b.memStart(ag, {{5 * kGiB, MemCategory::AllGather}});
    b.memEnd(ag, {{-5 * kGiB, MemCategory::AllGather}});
    b.program().initial[core::index(MemCategory::ShardedParam)] = 1 * kGiB;
    return b;
}

// The timed memory of the builder's program, simulated on roundProfile().
core::TimedMemory timedMemory(ProgramBuilder& b) {
    Simulator sim(roundProfile());
    core::Timeline t;
    sim.run(b.program(), t);
    core::MemoryTimer timer;
    core::TimedMemory m;
    timer.compute(b.program(), t, m);
    return m;
}

HardwareProfile noLatency() {
    HardwareProfile p = roundProfile();
    p.gpu.intra_node_latency_s = 0;
    return p;
}

TEST(MemoryCurveTest, PeakDependsOnWhatOverlapsInTime) {
    Simulator sim(noLatency());
    core::MemoryTimer timer;
    core::Timeline t;
    core::TimedMemory m;

    ProgramBuilder concurrent = twoStreams(false);
    sim.run(concurrent.program(), t);
    timer.compute(concurrent.program(), t, m);
    EXPECT_EQ(m.peak_bytes, 16 * kGiB);  // 1 + 10 + 5 while both run (0 - 1 ms)
    EXPECT_EQ(m.at_peak[core::index(MemCategory::AllGather)], 5 * kGiB);
    EXPECT_EQ(m.peak_time_ns, 0);

    ProgramBuilder serial = twoStreams(true);
    sim.run(serial.program(), t);
    timer.compute(serial.program(), t, m);
    // The all-gather starts at 2 ms, the instant the forward frees: ends apply before starts.
    EXPECT_EQ(t.tasks[1].start_ns, 2 * kMs);
    EXPECT_EQ(m.peak_bytes, 11 * kGiB);
    EXPECT_EQ(m.max_per_category[core::index(MemCategory::AllGather)], 5 * kGiB);
}

TEST(MemoryCurveTest, TransientPeakAppliesAtTheMidpointOnly) {
    ProgramBuilder b;
    const int32_t f = b.compute(TaskKind::Backward, 1, kTwoMsFlops);
    b.memPeak(f, {{3 * kGiB, MemCategory::Temp}});
    b.memEnd(f, {{2 * kGiB, MemCategory::ShardedGrad}});
    Simulator sim(roundProfile());
    core::Timeline t;
    sim.run(b.program(), t);
    core::MemoryTimer timer;
    core::TimedMemory m;
    timer.compute(b.program(), t, m, true);
    EXPECT_EQ(m.peak_bytes, 3 * kGiB);
    EXPECT_EQ(m.peak_time_ns, 1 * kMs);
    EXPECT_EQ(m.peak_task, f);
    // initial, peak, undone, end
    ASSERT_EQ(m.curve.size(), 4u);
    EXPECT_EQ(m.curve.back().time_ns, 2 * kMs);
    EXPECT_EQ(m.curve.back().bytes[core::index(MemCategory::ShardedGrad)], 2 * kGiB);
    EXPECT_EQ(m.curve.back().bytes[core::index(MemCategory::Temp)], 0);
}

// The categories at the peak are those of the instant the total peaked, whatever changes after:
// a free that follows it (the forward's end), and a transient that moves bytes between categories
// without reaching it (3 GiB of Temp made while 5 GiB of Activation is already released).
TEST(MemoryCurveTest, CategoriesAtThePeakAreThoseOfThePeakInstant) {
    const int temp = core::index(MemCategory::Temp), act = core::index(MemCategory::Activation);
    {
        ProgramBuilder b;
        const int32_t f = b.compute(TaskKind::Forward, 1, kTwoMsFlops);
        b.memStart(f, {{4 * kGiB, MemCategory::Temp}, {6 * kGiB, MemCategory::Activation}});
        b.memEnd(f, {{-4 * kGiB, MemCategory::Temp}, {4 * kGiB, MemCategory::Activation}});
        const core::TimedMemory m = timedMemory(b);
        EXPECT_EQ(m.peak_bytes, 10 * kGiB);  // at the start; the end frees 4 and makes 4: no new peak
        EXPECT_EQ(m.peak_time_ns, 0);
        EXPECT_EQ(m.at_peak[temp], 4 * kGiB);
        EXPECT_EQ(m.at_peak[act], 6 * kGiB);
        EXPECT_EQ(m.max_per_category[act], 10 * kGiB);
    }
    {
        ProgramBuilder b;
        const int32_t f = b.compute(TaskKind::Forward, 1, kTwoMsFlops);
        b.memStart(f, {{10 * kGiB, MemCategory::Activation}});
        const int32_t g = b.compute(TaskKind::Backward, 1, kTwoMsFlops);
        b.memPeak(g, {{3 * kGiB, MemCategory::Temp}, {-5 * kGiB, MemCategory::Activation}});
        b.memEnd(g, {{-10 * kGiB, MemCategory::Activation}});
        const core::TimedMemory m = timedMemory(b);
        EXPECT_EQ(m.peak_bytes, 10 * kGiB);  // the transient holds 10 + 3 - 5 = 8
        EXPECT_EQ(m.peak_task, f);
        EXPECT_EQ(m.at_peak[temp], 0);
        EXPECT_EQ(m.at_peak[act], 10 * kGiB);
        EXPECT_EQ(m.max_per_category[temp], 3 * kGiB);
    }
}

TEST(MemoryCurveTest, ZeroDurationTaskAppliesStartBeforeEnd) {
    ProgramBuilder b;
    const int32_t c = b.add(TaskKind::Cast, Stream::Compute, 1);
    b.memStart(c, {{4 * kGiB, MemCategory::Temp}});
    b.memEnd(c, {{-4 * kGiB, MemCategory::Temp}});
    EXPECT_EQ(timedMemory(b).peak_bytes, 4 * kGiB);
}

TEST(ChromeTraceTest, ParsesWithOneNamedTrackPerStreamUsed) {
    ProgramBuilder b = twoStreams(false);
    b.program().units[1].name = "model.layers.3";
    Simulator sim(noLatency());
    core::Timeline t;
    sim.run(b.program(), t);
    core::MemoryTimer timer;
    core::TimedMemory m;
    timer.compute(b.program(), t, m, true);
    const std::string text = chromeTrace(b.program(), t, &m).dump();

    const nlohmann::json j = nlohmann::json::parse(text);  // throws if malformed
    ASSERT_TRUE(j.contains("traceEvents"));
    std::set<int> named_tids;
    std::set<std::string> track_names;
    std::set<int> event_tids;
    std::set<std::string> labels;
    int counters = 0;
    for (const auto& e : j["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "M" && e["name"] == "thread_name") {
            named_tids.insert(e["tid"].get<int>());
            track_names.insert(e["args"]["name"].get<std::string>());
        } else if (ph == "X") {
            event_tids.insert(e["tid"].get<int>());
            labels.insert(e["name"].get<std::string>());
            EXPECT_GE(e["dur"].get<double>(), 0.0);
        } else if (ph == "C") {
            ++counters;
            EXPECT_TRUE(e["args"].contains("All Gather"));
        }
    }
    EXPECT_EQ(named_tids, event_tids);
    EXPECT_EQ(track_names, (std::set<std::string>{std::string(core::streamName(Stream::Compute)),
                                                  std::string(core::streamName(Stream::AllGather))}));
    EXPECT_EQ(labels, (std::set<std::string>{"FWD layers.3", "AG layers.1"}));
    EXPECT_EQ(counters, static_cast<int>(m.curve.size()));
    // The forward: 0 - 2 ms, in microseconds.
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] == "X" && e["name"] == "FWD layers.3") {
            EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
            EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2000.0);
            EXPECT_EQ(e["args"]["flops"].get<int64_t>(), kTwoMsFlops);
        }
    }
}

}  // namespace
}  // namespace shardcast::sim
