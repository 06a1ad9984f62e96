#include "simulator/simulator.hpp"

#include <gtest/gtest.h>

#include "core/memory/timed_memory.hpp"
#include "core/results/step_summary.hpp"
#include "program_builder.hpp"
#include "simulator/cost_model.hpp"

namespace shardcast::sim {
namespace {

using core::Stream;
using core::TaskKind;
using testing::kMs;
using testing::kTwoMsFlops;
using testing::ProgramBuilder;
using testing::roundProfile;

// With no latency, a 2-rank all-gather of S bytes takes S * (1/2) / 80 GB/s: 160 MB -> 1 ms.
constexpr int64_t kOneMsAllGatherBytes = 160'000'000;

HardwareProfile noLatency() {
    HardwareProfile p = roundProfile();
    p.gpu.intra_node_latency_s = 0;
    p.gpu.inter_node_latency_s = 0;
    return p;
}

core::Timeline simulate(const HardwareProfile& profile, const core::Program& program) {
    Simulator sim(profile);
    core::Timeline t;
    sim.run(program, t);
    return t;
}

TEST(SimulatorTest, PureComputeTakesFlopsOverPeakTimesEfficiency) {
    ProgramBuilder b;
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    const core::Timeline t = simulate(roundProfile(), b.program());
    // 1e12 FLOPs / (1e15 FLOP/s * 0.5) = 2 ms exactly.
    EXPECT_EQ(t.tasks[0].start_ns, 0);
    EXPECT_EQ(t.tasks[0].end_ns, 2 * kMs);
    EXPECT_EQ(t.step_ns, 2 * kMs);
    EXPECT_EQ(t.busyNs(Stream::Compute), 2 * kMs);
}

TEST(SimulatorTest, EfficiencyRisesWithSizeAndSaturates) {
    HardwareProfile p = roundProfile();
    p.gemm_half_flops = 1e12;  // a 1e12-FLOP task runs at half of eff_max: 4 ms
    ProgramBuilder b;
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    EXPECT_EQ(simulate(p, b.program()).step_ns, 4 * kMs);
}

TEST(SimulatorTest, MemoryBoundTaskUsesHbmBandwidth) {
    ProgramBuilder b;
    const int32_t id = b.add(TaskKind::CopyOut, Stream::Compute, 1);
    b.task(id).hbm_bytes = 3'000'000'000;  // 3 GB at 1e12 B/s = 3 ms
    b.task(id).flops = 1000;
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 3 * kMs);
}

TEST(SimulatorTest, AllGatherTakesLatencyPlusBusBandwidthTime) {
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 1, 8'000'000'000, 8, 1);
    // nccl-tests: factor (n-1)/n = 7/8; busbw = 0.8 * 100 GB/s = 80 GB/s;
    // t = 10 us + 8e9 * 7/8 / 80e9 s = 10 us + 87.5 ms.
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 87'510'000);
}

TEST(SimulatorTest, BusBandwidthHalvesAtHalfSize) {
    HardwareProfile p = roundProfile();
    p.busbw_half_bytes = 8e9;
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 1, 8'000'000'000, 8, 1);
    EXPECT_EQ(simulate(p, b.program()).step_ns, 175'010'000);
}

TEST(SimulatorTest, AllReduceUsesTwiceTheFactor) {
    ProgramBuilder b;
    b.collective(TaskKind::AllReduce, -1, 8'000'000'000, 8, 1);
    // factor 2 * 7/8: 10 us + 175 ms.
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 175'010'000);
}

TEST(SimulatorTest, GroupSpanningNodesUsesNetworkBandwidth) {
    ProgramBuilder b;
    b.collective(TaskKind::ReduceScatter, 1, 1'000'000'000, 2, 2);
    // One GPU of the group per node: busbw = 0.5 * 10 GB/s = 5 GB/s (below NVLink's 80 GB/s);
    // t = 20 us (inter-node latency) + 1e9 * 1/2 / 5e9 s = 100.02 ms.
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 100'020'000);
}

TEST(SimulatorTest, GroupSpanningNodesAggregatesTheNicsOfItsGpusPerNode) {
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 1, 1'600'000'000, 16, 2);
    // 8 GPUs of the group per node: min(80 GB/s NVLink, 0.5 * 10 GB/s * 8 = 40 GB/s) = 40 GB/s;
    // t = 20 us + 1.6e9 * 15/16 / 40e9 s = 20 us + 37.5 ms.
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 37'520'000);
}

TEST(SimulatorTest, GroupOfOneRankTakesNoTime) {
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 1, 8'000'000'000, 1, 1);
    b.collective(TaskKind::AllReduce, 1, 8'000'000'000, 1, 1);
    EXPECT_EQ(simulate(roundProfile(), b.program()).step_ns, 0);
}

TEST(SimulatorTest, CommunicationShorterThanComputeIsHidden) {
    ProgramBuilder b;
    const int32_t ag = b.collective(TaskKind::AllGather, 2, kOneMsAllGatherBytes, 2, 1);  // 1 ms
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                                          // 2 ms
    b.compute(TaskKind::Forward, 2, kTwoMsFlops, {ag});
    const core::Timeline t = simulate(noLatency(), b.program());
    EXPECT_EQ(t.step_ns, 4 * kMs);
    core::StepSummary s;
    core::summarizeStep(b.program(), t, core::TimedMemory{}, noLatency().peakFlops(b.program().compute_dtype), s);
    EXPECT_DOUBLE_EQ(s.exposed_comm_s, 0.0);
    EXPECT_DOUBLE_EQ(s.all_gather_s, 1e-3);
}

TEST(SimulatorTest, CommunicationLongerThanComputeIsExposedByTheDifference) {
    ProgramBuilder b;
    const int32_t ag = b.collective(TaskKind::AllGather, 2, 3 * kOneMsAllGatherBytes, 2, 1);  // 3 ms
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                                              // 2 ms
    b.compute(TaskKind::Forward, 2, kTwoMsFlops, {ag});
    const core::Timeline t = simulate(noLatency(), b.program());
    EXPECT_EQ(t.tasks[2].start_ns, 3 * kMs);
    EXPECT_EQ(t.step_ns, 5 * kMs);
    core::StepSummary s;
    core::summarizeStep(b.program(), t, core::TimedMemory{}, noLatency().peakFlops(b.program().compute_dtype), s);
    EXPECT_DOUBLE_EQ(s.exposed_comm_s, 1e-3);
}

TEST(SimulatorTest, PrefetchIssuedEarlierReducesExposedCommunication) {
    // Without prefetch the all-gather of unit 2 waits for unit 1's forward: 2 + 3 + 2 ms.
    ProgramBuilder late;
    const int32_t f1 = late.compute(TaskKind::Forward, 1, kTwoMsFlops);
    const int32_t ag_late = late.collective(TaskKind::AllGather, 2, 3 * kOneMsAllGatherBytes, 2, 1, {f1});
    late.compute(TaskKind::Forward, 2, kTwoMsFlops, {ag_late});
    // Prefetched: issued before unit 1's forward, it overlaps it: 3 + 2 ms.
    ProgramBuilder early;
    const int32_t ag_early = early.collective(TaskKind::AllGather, 2, 3 * kOneMsAllGatherBytes, 2, 1);
    early.compute(TaskKind::Forward, 1, kTwoMsFlops);
    early.compute(TaskKind::Forward, 2, kTwoMsFlops, {ag_early});
    EXPECT_EQ(simulate(noLatency(), late.program()).step_ns, 7 * kMs);
    EXPECT_EQ(simulate(noLatency(), early.program()).step_ns, 5 * kMs);
}

TEST(SimulatorTest, OverlapSlowsComputeByContentionFactorExactly) {
    HardwareProfile p = noLatency();
    p.overlap_compute_slowdown = 1.25;
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 2, kOneMsAllGatherBytes, 2, 1);  // 0 - 1 ms
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                      // 2 ms of work
    const core::Timeline t = simulate(p, b.program());
    // During the first 1 ms the forward does 1 / 1.25 = 0.8 ms of work; the remaining 1.2 ms runs
    // at full speed: it ends at 2.2 ms.
    EXPECT_EQ(t.tasks[0].end_ns, 1 * kMs);
    EXPECT_EQ(t.tasks[1].end_ns, 2'200'000);
}

TEST(SimulatorTest, ComputeStartingDuringACollectiveIsSlowedFromItsStart) {
    HardwareProfile p = noLatency();
    p.overlap_compute_slowdown = 1.5;
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 2, 4 * kOneMsAllGatherBytes, 2, 1);  // 0 - 4 ms
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                          // 2 ms * 1.5 = 3 ms
    const core::Timeline t = simulate(p, b.program());
    EXPECT_EQ(t.tasks[1].end_ns, 3 * kMs);
}

TEST(SimulatorTest, ComputeSlowsCollectivesByTheirContentionFactorExactly) {
    HardwareProfile p = noLatency();
    p.overlap_compute_slowdown = 1.0;
    p.overlap_collective_slowdown = 4.0;
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 2, kOneMsAllGatherBytes, 2, 1);  // 1 ms of work
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                      // 0 - 2 ms
    const core::Timeline t = simulate(p, b.program());
    // While the forward runs (2 ms) the all-gather does 2 / 4 = 0.5 ms of work; the other 0.5 ms
    // runs at full speed once the forward has ended: 2.5 ms.
    EXPECT_EQ(t.tasks[1].end_ns, 2 * kMs);
    EXPECT_EQ(t.tasks[0].end_ns, 2'500'000);
    EXPECT_EQ(t.busyNs(Stream::AllGather), 2'500'000);
}

TEST(SimulatorTest, ContentionBothWaysSlowsEachUntilTheOtherEnds) {
    HardwareProfile p = noLatency();
    p.overlap_compute_slowdown = 1.25;
    p.overlap_collective_slowdown = 2.0;
    ProgramBuilder b;
    b.collective(TaskKind::AllGather, 2, kOneMsAllGatherBytes, 2, 1);  // 1 ms of work
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);                      // 2 ms of work
    const core::Timeline t = simulate(p, b.program());
    // Both slowed from 0: the all-gather's 1 ms at half speed ends at 2 ms, by when the forward has
    // done 2 / 1.25 = 1.6 ms of its work; the other 0.4 ms runs alone: 2.4 ms.
    EXPECT_EQ(t.tasks[0].end_ns, 2 * kMs);
    EXPECT_EQ(t.tasks[1].end_ns, 2'400'000);
}

TEST(SimulatorTest, HostLaunchOverheadDelaysIssue) {
    HardwareProfile p = roundProfile();
    p.task_launch_ns = 1 * kMs;
    ProgramBuilder b;
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    b.compute(TaskKind::Forward, 2, kTwoMsFlops);
    const core::Timeline t = simulate(p, b.program());
    // Issued at 1 ms and 2 ms; the host runs ahead, so the second waits only for the stream.
    EXPECT_EQ(t.tasks[0].start_ns, 1 * kMs);
    EXPECT_EQ(t.tasks[1].start_ns, 3 * kMs);
    EXPECT_EQ(t.step_ns, 5 * kMs);
}

TEST(SimulatorTest, HostBlocksThrottlesTheHost) {
    HardwareProfile p = roundProfile();
    p.task_launch_ns = 1 * kMs;
    ProgramBuilder b;
    const int32_t first = b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    b.task(first).host_blocks = true;
    b.compute(TaskKind::Forward, 2, kTwoMsFlops);
    const core::Timeline t = simulate(p, b.program());
    // The host waits for the first task (1 - 3 ms), then spends 1 ms issuing the second.
    EXPECT_EQ(t.tasks[1].start_ns, 4 * kMs);
    EXPECT_EQ(t.step_ns, 6 * kMs);
}

TEST(SimulatorTest, UnitHooksChargedOncePerUnitAndPass) {
    HardwareProfile p = roundProfile();
    p.task_launch_ns = 10;
    p.unit_hook_ns = 1000;
    ProgramBuilder b;
    b.add(TaskKind::AllGather, Stream::AllGather, 1);   // unit 1 forward: hooks
    b.add(TaskKind::CopyOut, Stream::Compute, 1);       // same unit and pass: none
    b.compute(TaskKind::Forward, 1, 0);                 // none
    b.compute(TaskKind::Backward, 1, 0);                // unit 1 backward: hooks
    b.compute(TaskKind::Backward, 0, 0);                // unit 0 backward: hooks
    b.add(TaskKind::OptimizerStep, Stream::Compute, -1); // step-level: no hooks
    Simulator sim(p);
    core::Timeline t;
    sim.run(b.program(), t);
    const std::vector<int64_t> expected = {1010, 10, 10, 1010, 1010, 10};
    EXPECT_EQ(sim.issueCostNs(), expected);
    EXPECT_EQ(t.step_ns, 1010 + 10 + 10 + 1010 + 1010 + 10);
}

TEST(SimulatorTest, CpuOptimizerRunsOnTheHostAtItsRate) {
    ProgramBuilder b;
    const int32_t opt = b.add(TaskKind::OptimizerStep, Stream::Host, -1);
    b.task(opt).hbm_bytes = 16'000'000'000;  // 16 GB at 16 GB/s: 1 s
    const int32_t h2d = b.add(TaskKind::HostToDevice, Stream::HostToDevice, 1);
    b.task(h2d).comm_bytes = 2'000'000'000;  // 2 GB at 20 GB/s: 100 ms
    const core::Timeline t = simulate(roundProfile(), b.program());
    EXPECT_EQ(t.tasks[0].end_ns, 1'000 * kMs);
    // The host thread ran the optimizer, so the copy is issued after it.
    EXPECT_EQ(t.tasks[1].start_ns, 1'000 * kMs);
    EXPECT_EQ(t.step_ns, 1'100 * kMs);
}

TEST(SimulatorTest, EqualTimesAreDeterministicAndReusable) {
    HardwareProfile p = noLatency();
    p.overlap_compute_slowdown = 1.1;
    ProgramBuilder b(4);
    for (int u = 1; u < 4; ++u) {
        const int32_t ag = b.collective(TaskKind::AllGather, u, kOneMsAllGatherBytes, 2, 1);
        const int32_t f = b.compute(TaskKind::Forward, u, kTwoMsFlops / 2, {ag});
        b.collective(TaskKind::ReduceScatter, u, kOneMsAllGatherBytes, 2, 1, {f});
    }
    Simulator sim(p);
    core::Timeline first, second;
    sim.run(b.program(), first);
    ProgramBuilder other;
    other.compute(TaskKind::Forward, 1, kTwoMsFlops);
    core::Timeline scratch;
    sim.run(other.program(), scratch);
    sim.run(b.program(), second);
    ASSERT_EQ(first.tasks.size(), second.tasks.size());
    for (size_t i = 0; i < first.tasks.size(); ++i) {
        EXPECT_EQ(first.tasks[i].start_ns, second.tasks[i].start_ns) << i;
        EXPECT_EQ(first.tasks[i].end_ns, second.tasks[i].end_ns) << i;
    }
    EXPECT_EQ(first.step_ns, second.step_ns);
    EXPECT_EQ(scratch.step_ns, 2 * kMs);
}

TEST(SimulatorTest, TasksOnOneStreamRunInProgramOrder) {
    ProgramBuilder b;
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    b.compute(TaskKind::Forward, 2, kTwoMsFlops);
    const core::Timeline t = simulate(roundProfile(), b.program());
    EXPECT_EQ(t.tasks[1].start_ns, t.tasks[0].end_ns);
}

TEST(SummaryTest, MfuAndThroughputFollowTheirDefinitions) {
    ProgramBuilder b;
    b.compute(TaskKind::Forward, 1, kTwoMsFlops);
    b.program().micro_batches = 2;
    b.program().tokens_per_micro_batch = 1000;
    b.program().model_flops_per_step = 500'000'000'000;
    b.program().hardware_flops_per_step = kTwoMsFlops;
    const HardwareProfile p = roundProfile();
    const core::Timeline t = simulate(p, b.program());
    const core::StepSummary s = core::summarize(b.program(), t, core::TimedMemory{}, p.peakFlops(b.program().compute_dtype));
    EXPECT_DOUBLE_EQ(s.step_s, 2e-3);
    EXPECT_DOUBLE_EQ(s.mfu, 0.25);  // 5e11 / (2e-3 s * 1e15)
    EXPECT_DOUBLE_EQ(s.hfu, 0.5);
    EXPECT_DOUBLE_EQ(s.tokens_per_s_per_gpu, 1e6);  // 2 * 1000 / 2 ms
    ASSERT_EQ(s.units.size(), 3u);
    EXPECT_EQ(s.units[1].compute_ns, 2 * kMs);
}

TEST(CostModelTest, DefaultH200AllGatherMatchesMeasuredBusBandwidth) {
    auto gpu = core::findGpuPreset("H200");
    ASSERT_TRUE(gpu.has_value());
    core::ClusterSpec cluster;
    cluster.gpu = *gpu;
    const HardwareProfile p = HardwareProfile::fromCluster(cluster);
    const CostModel cost(p);
    // reference-cases.json: 8 x H200 NVLink all-gather busbw 361.4 GB/s at 16 GiB.
    const double busbw = cost.busBandwidth(TaskKind::AllGather, int64_t{16} << 30, 8, 1);
    EXPECT_NEAR(busbw / 361.4e9, 1.0, 0.03);
    // All-reduce by size (ring efficiency, below NVLS's measured figures): within 25% from 16 MiB.
    EXPECT_NEAR(cost.busBandwidth(TaskKind::AllReduce, int64_t{256} << 20, 8, 1) / 436.15e9, 1.0, 0.25);
}

}  // namespace
}  // namespace shardcast::sim
