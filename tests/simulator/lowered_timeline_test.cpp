// Real plans lowered and simulated: gradient accumulation, no_sync, HSDP, SHARD_GRAD_OP,
// offload, prefetch and FSDP1's rate limiter must show up on the timeline as FSDP runs them.
#include <gtest/gtest.h>

#include <memory>

#include "core/lower/lower.hpp"
#include "core/memory/memory.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/timeline.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/simulator.hpp"

using namespace shardcast;
using core::Stream;
using core::TaskKind;

namespace {

std::shared_ptr<const core::Model> llama8b() {
    static const std::shared_ptr<const core::Model> model = [] {
        auto m = core::resolveModel("llama-3.1-8b");
        EXPECT_TRUE(m.ok());
        return std::make_shared<const core::Model>(std::move(*m));
    }();
    return model;
}

core::Plan basePlan(int nodes) {
    core::Plan plan;
    plan.model = llama8b();
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = 4096;
    return plan;
}

struct Run {
    core::Program program;
    core::Timeline timeline;
};

Run simulate(const core::Plan& plan) {
    Run r;
    auto mesh = core::validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    auto st = core::lower(plan, *mesh, r.program);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    sim::Simulator simulator(sim::HardwareProfile::fromCluster(plan.cluster));
    simulator.run(r.program, r.timeline);
    return r;
}

int count(const core::Program& p, TaskKind kind) {
    int n = 0;
    for (const core::Task& t : p.tasks) n += t.kind == kind;
    return n;
}

int64_t exposedNs(const Run& r) { return r.timeline.step_ns - r.timeline.busyNs(Stream::Compute); }

}  // namespace

TEST(LoweredTimelineTest, GradientAccumulationRepeatsTheMicroBatch) {
    auto plan = basePlan(1);
    auto one = simulate(plan);
    plan.training.grad_accum = 4;
    auto four = simulate(plan);
    EXPECT_EQ(count(four.program, TaskKind::ReduceScatter), 4 * count(one.program, TaskKind::ReduceScatter));
    EXPECT_EQ(count(four.program, TaskKind::Forward), 4 * count(one.program, TaskKind::Forward));
    const double ratio = static_cast<double>(four.timeline.step_ns) / static_cast<double>(one.timeline.step_ns);
    EXPECT_GT(ratio, 3.5);
    EXPECT_LT(ratio, 4.1);
}

// no_sync: every reduce-scatter runs in the last micro-batch, after its forward started.
TEST(LoweredTimelineTest, NoSyncReducesOnlyInTheLastMicroBatch) {
    auto plan = basePlan(1);
    plan.training.grad_accum = 3;
    plan.training.no_sync = true;
    auto r = simulate(plan);
    int64_t last_mb_start = INT64_MAX;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const core::Task& t = r.program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch == 2 && t.kind == TaskKind::Forward) {
            last_mb_start = std::min(last_mb_start, r.timeline.tasks[static_cast<size_t>(id)].start_ns);
        }
    }
    int reduces = 0;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const core::Task& t = r.program.tasks[static_cast<size_t>(id)];
        if (t.kind != TaskKind::ReduceScatter) continue;
        ++reduces;
        EXPECT_EQ(t.micro_batch, 2);
        EXPECT_GT(r.timeline.tasks[static_cast<size_t>(id)].start_ns, last_mb_start);
    }
    EXPECT_EQ(reduces, 33);
}

// HSDP: the replicate all-reduce crosses nodes, so it runs no faster than one GPU's network
// share (400 Gb/s NDR = 50e9 B/s per GPU for H100-SXM); all-gathers stay on NVLink.
TEST(LoweredTimelineTest, HybridAllReduceRunsOnTheNetwork) {
    auto plan = basePlan(2);
    plan.sharding.strategy = core::Strategy::HybridShard;
    auto r = simulate(plan);
    int all_reduces = 0;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const core::Task& t = r.program.tasks[static_cast<size_t>(id)];
        const core::TaskTime& tt = r.timeline.tasks[static_cast<size_t>(id)];
        if (t.kind != TaskKind::AllReduce) continue;
        ++all_reduces;
        EXPECT_EQ(tt.stream, Stream::AllReduce);
        // 2 ranks: busbw factor 2(n-1)/n = 1, so t >= S / network.
        const double floor_s = static_cast<double>(t.comm_bytes) / plan.cluster.gpu.network_bytes_per_s;
        EXPECT_GE(static_cast<double>(tt.durationNs()) * 1e-9, floor_s);
    }
    EXPECT_EQ(all_reduces, 33);
}

// SHARD_GRAD_OP gathers each unit once; FULL_SHARD gathers every block again in backward.
TEST(LoweredTimelineTest, ShardGradOpGathersOnce) {
    auto plan = basePlan(1);
    auto zero3 = simulate(plan);
    plan.sharding.strategy = core::Strategy::ShardGradOp;
    auto zero2 = simulate(plan);
    EXPECT_EQ(count(zero2.program, TaskKind::AllGather), 33);
    EXPECT_EQ(count(zero3.program, TaskKind::AllGather), 1 + 2 * 32);
    EXPECT_LT(zero2.timeline.busyNs(Stream::AllGather), zero3.timeline.busyNs(Stream::AllGather));
}

// CPU offload: each all-gather waits for its shard's host-to-device copy; the optimizer runs on
// the host and ends the step.
TEST(LoweredTimelineTest, OffloadCopiesBeforeGathering) {
    auto plan = basePlan(1);
    plan.training.offload = core::Offload::Cpu;
    auto r = simulate(plan);
    int32_t last_h2d = -1;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const core::Task& t = r.program.tasks[static_cast<size_t>(id)];
        if (t.kind == TaskKind::HostToDevice) last_h2d = id;
        if (t.kind == TaskKind::AllGather) {
            ASSERT_GE(last_h2d, 0);
            EXPECT_GE(r.timeline.tasks[static_cast<size_t>(id)].start_ns,
                      r.timeline.tasks[static_cast<size_t>(last_h2d)].end_ns);
        }
    }
    const core::TaskTime& opt = r.timeline.tasks.back();
    EXPECT_EQ(opt.stream, Stream::Host);
    EXPECT_EQ(opt.end_ns, r.timeline.step_ns);
    EXPECT_GT(r.timeline.busyNs(Stream::HostToDevice), 0);
    EXPECT_GT(r.timeline.busyNs(Stream::DeviceToHost), 0);
}

// FSDP1 backward prefetch: without it every backward all-gather is exposed.
TEST(LoweredTimelineTest, BackwardPrefetchHidesAllGathers) {
    auto plan = basePlan(4);  // 32 ranks over 4 nodes: the gathers cross the network
    plan.sharding.fsdp_version = 1;
    plan.sharding.backward_prefetch = core::ShardingSpec::BackwardPrefetch::Pre;
    auto pre = simulate(plan);
    plan.sharding.backward_prefetch = core::ShardingSpec::BackwardPrefetch::None;
    auto none = simulate(plan);
    EXPECT_LT(exposedNs(pre), exposedNs(none));
    EXPECT_LT(pre.timeline.step_ns, none.timeline.step_ns);
}

// FSDP1's rate limiter makes the host wait before an all-gather while two freed units are in
// flight; without it the host never waits.
TEST(LoweredTimelineTest, Fsdp1RateLimiterMakesTheHostWait) {
    auto plan = basePlan(1);
    plan.sharding.fsdp_version = 1;
    auto limited = simulate(plan);
    int waits = 0;
    for (const core::Task& t : limited.program.tasks) waits += t.host_wait >= 0;
    EXPECT_GT(waits, 30);
    plan.sharding.limit_all_gathers = false;
    auto unlimited = simulate(plan);
    for (const core::Task& t : unlimited.program.tasks) EXPECT_EQ(t.host_wait, -1);
}

// A task the rate limiter holds back is issued only after the free it waits for has happened.
TEST(LoweredTimelineTest, RateLimitedAllGathersWaitForTheFree) {
    auto plan = basePlan(1);
    plan.sharding.fsdp_version = 1;
    auto r = simulate(plan);
    int checked = 0;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const core::Task& t = r.program.tasks[static_cast<size_t>(id)];
        if (t.host_wait < 0) continue;
        ++checked;
        EXPECT_GE(r.timeline.tasks[static_cast<size_t>(id)].start_ns,
                  r.timeline.tasks[static_cast<size_t>(t.host_wait)].end_ns);
    }
    EXPECT_GT(checked, 30);
}

// Placed at simulated times, every free still follows its allocation: no category of the timed
// memory curve goes below zero, across accumulation, no_sync, strategies and offload.
TEST(LoweredTimelineTest, TimedMemoryNeverGoesNegative) {
    for (core::Strategy s : {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard,
                             core::Strategy::NoShard}) {
        for (bool no_sync : {false, true}) {
            for (int fsdp : {1, 2}) {
                auto plan = basePlan(2);
                plan.sharding.strategy = s;
                plan.sharding.fsdp_version = fsdp;
                plan.training.grad_accum = 3;
                plan.training.micro_batch = 2;
                plan.training.no_sync = no_sync;
                auto r = simulate(plan);
                core::MemoryTimer timer;
                core::TimedMemory memory;
                timer.compute(r.program, r.timeline, memory, /*record_curve=*/true);
                ASSERT_FALSE(memory.curve.empty());
                for (const core::MemoryPoint& point : memory.curve) {
                    for (int c = 0; c < core::kMemCategoryCount; ++c) {
                        ASSERT_GE(point.bytes[c], 0) << core::categoryName(static_cast<core::MemCategory>(c)) << " at "
                                                     << r.program.taskLabel(point.task) << " ("
                                                     << core::strategyName(s) << ", fsdp" << fsdp << ")";
                    }
                }
            }
        }
    }
}

// Rule 4 on the timeline too: the previous unit's flat all-gather output is released when its
// copy-out ends (the allocator then hands its block to the next all-gather), so however far the
// copy-in stream runs ahead, at most two flat outputs are counted, as in issue order.
TEST(LoweredTimelineTest, TimedCurveHoldsAtMostTwoFlatOutputs) {
    auto plan = basePlan(1);
    auto r = simulate(plan);
    core::MemoryReport issue_order;
    core::replayMemory(r.program, issue_order);
    core::MemoryTimer timer;
    core::TimedMemory timed;
    timer.compute(r.program, r.timeline, timed);
    const int ag = core::index(core::MemCategory::AllGather);
    EXPECT_EQ(timed.max_per_category[ag], issue_order.max_per_category[ag]);
    // The root's flat output (embeddings + head) and one block's; the block's cast copy is not
    // All Gather (FSDPMemTracker files only _allgather_base_'s output so).
    const int64_t root_flat = r.program.units[0].unsharded_bytes;
    const int64_t block_flat = r.program.units[1].unsharded_bytes;
    EXPECT_EQ(timed.max_per_category[ag], root_flat + block_flat);
}
