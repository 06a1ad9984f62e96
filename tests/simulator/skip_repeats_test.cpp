// The simulator's skipping of repeated blocks (Simulator::trySkip) gives exactly the timeline that
// simulating every event gives: on hand-made programs whose repetition breaks in each input the
// proof relies on, and on lowered plans of every bundled model across strategies, FSDP versions,
// activation checkpointing, micro-batches, offload and contention.
#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/simulator.hpp"
#include "tests/simulator/program_builder.hpp"

namespace shardcast::sim {
namespace {

using core::Stream;
using core::TaskKind;
using testing::kMs;
using testing::kTwoMsFlops;
using testing::ProgramBuilder;

constexpr int64_t kOneMsAllGatherBytes = 160'000'000;  // at 100 GB/s x 0.8 with 2 ranks (factor 1/2)

struct Both {
    core::Timeline fast, full;
    int64_t skipped = 0;
};

Both simulateBoth(const HardwareProfile& profile, const core::Program& program) {
    Both b;
    Simulator full(profile);
    full.setSkipRepeats(false);
    full.run(program, b.full);
    EXPECT_EQ(full.lastSkippedPeriods(), 0);
    Simulator fast(profile);
    fast.run(program, b.fast);
    b.skipped = fast.lastSkippedPeriods();
    fast.run(program, b.fast);  // reused: the same timeline again
    EXPECT_EQ(fast.lastSkippedPeriods(), b.skipped);
    return b;
}

// `blocks` units, each: copy-in-free all-gather (prefetched one unit ahead), forward waiting for
// it. `odd_block`: a block whose forward does 1.5 times the work (-1: none).
core::Program blocks(int blocks, int odd_block = -1, int64_t ag_bytes = kOneMsAllGatherBytes) {
    ProgramBuilder b(blocks + 1);
    int32_t prev_fwd = -1;
    int32_t ag_next = b.collective(TaskKind::AllGather, 1, ag_bytes, 2, 1);
    for (int u = 1; u <= blocks; ++u) {
        const int32_t ag = ag_next;
        if (u < blocks) ag_next = b.collective(TaskKind::AllGather, u + 1, ag_bytes, 2, 1);
        const int64_t flops = u == odd_block ? kTwoMsFlops * 3 / 2 : kTwoMsFlops;
        prev_fwd = prev_fwd < 0 ? b.compute(TaskKind::Forward, u, flops, {ag}) : b.compute(TaskKind::Forward, u, flops, {ag, prev_fwd});
    }
    return b.program();
}

TEST(SkipRepeatsTest, IdenticalBlocksAreCopiedExactly) {
    HardwareProfile p = testing::roundProfile();
    p.gpu.intra_node_latency_s = 0;
    const core::Program program = blocks(12);
    const Both b = simulateBoth(p, program);
    EXPECT_EQ(b.fast, b.full);
    EXPECT_GT(b.skipped, 0);
    // By hand: the all-gathers take 1 ms each and run ahead; each forward takes 2 ms after the
    // first all-gather: 1 + 12 x 2 = 25 ms.
    EXPECT_EQ(b.full.step_ns, 25 * kMs);
}

TEST(SkipRepeatsTest, ABlockThatDiffersStopsTheCopy) {
    HardwareProfile p = testing::roundProfile();
    p.gpu.intra_node_latency_s = 0;
    for (int odd : {3, 7, 11, 12}) {
        const Both b = simulateBoth(p, blocks(12, odd));
        EXPECT_EQ(b.fast, b.full) << "odd block " << odd;
        EXPECT_GT(b.skipped, 0) << "odd block " << odd;  // before or after the odd block
        // 1 ms, 12 forwards of 2 ms and one of them 1 ms longer.
        EXPECT_EQ(b.full.step_ns, 26 * kMs) << "odd block " << odd;
    }
}

TEST(SkipRepeatsTest, ContentionAndCommunicationBoundBlocksAreCopiedExactly) {
    HardwareProfile p = testing::roundProfile();
    p.overlap_compute_slowdown = 1.25;
    p.overlap_collective_slowdown = 1.5;
    // Communication-bound (3 ms all-gathers against 2 ms forwards) and compute-bound, with latency.
    for (int64_t ag_bytes : {3 * kOneMsAllGatherBytes, kOneMsAllGatherBytes / 3, 2 * kOneMsAllGatherBytes}) {
        const Both b = simulateBoth(p, blocks(16, -1, ag_bytes));
        EXPECT_EQ(b.fast, b.full) << ag_bytes;
        EXPECT_GT(b.skipped, 0) << ag_bytes;
        const Both odd = simulateBoth(p, blocks(16, 9, ag_bytes));
        EXPECT_EQ(odd.fast, odd.full) << ag_bytes;
        EXPECT_GT(odd.skipped, 0) << ag_bytes;
    }
}

// A task that runs across blocks (a 10 ms all-reduce issued at the start) and a dependency that does
// not move with the blocks (every forward from the 13th waits for that all-reduce) break the
// repetition: blocks are copied only between the all-reduce's end and the 13th block.
TEST(SkipRepeatsTest, ADependencyThatDoesNotShiftIsRespected) {
    HardwareProfile p = testing::roundProfile();
    p.gpu.intra_node_latency_s = 0;
    ProgramBuilder b(20);
    const int32_t long_ag = b.add(TaskKind::AllReduce, Stream::AllReduce, 0);
    b.task(long_ag).comm_bytes = 5 * kOneMsAllGatherBytes;  // all-reduce: twice the factor, 10 ms
    b.task(long_ag).group_size = 2;
    b.task(long_ag).group_nodes = 1;
    int32_t prev = -1;
    for (int u = 1; u < 20; ++u) {
        const int32_t ag = b.collective(TaskKind::AllGather, u, kOneMsAllGatherBytes, 2, 1, prev < 0 ? std::initializer_list<int32_t>{}
                                                                                                   : std::initializer_list<int32_t>{prev});
        prev = u >= 13 ? b.compute(TaskKind::Forward, u, kTwoMsFlops, {ag, long_ag}) : b.compute(TaskKind::Forward, u, kTwoMsFlops, {ag});
    }
    const Both both = simulateBoth(p, b.program());
    EXPECT_EQ(both.fast, both.full);
    EXPECT_GT(both.skipped, 0);
}

struct Variant {
    core::Strategy strategy = core::Strategy::FullShard;
    int fsdp_version = 2;
    core::Checkpointing ac = core::Checkpointing::None;
    int64_t micro_batch = 1;
    int64_t grad_accum = 1;
    int64_t seq = 2048;
    core::ReshardMode reshard = core::ReshardMode::Default;
    core::Offload offload = core::Offload::None;
    int nodes = 1;
    int prefetch_depth = 1;
};

// Lowers the plan, simulates it with and without skipping; returns the periods skipped, -1 when the
// planner refuses the plan.
int64_t checkPlan(const std::string& model_name, const Variant& v) {
    auto model = core::resolveModel(model_name);
    if (!model) return -1;
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = v.nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = v.seq;
    plan.training.micro_batch = v.micro_batch;
    plan.training.grad_accum = v.grad_accum;
    plan.training.ac = v.ac;
    plan.training.offload = v.offload;
    plan.sharding.strategy = v.strategy;
    plan.sharding.fsdp_version = v.fsdp_version;
    plan.sharding.reshard_after_forward = v.reshard;
    plan.sharding.prefetch_depth = v.prefetch_depth;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    options.reserved_memory = false;
    if (!evaluator.evaluate(plan, nullptr, options, e).ok()) return -1;
    const Both b = simulateBoth(e.profile, e.program);
    const std::string what = model_name + " " + std::string(core::strategyName(v.strategy)) + " fsdp" +
                             std::to_string(v.fsdp_version) + " mb=" + std::to_string(v.micro_batch) + " accum=" +
                             std::to_string(v.grad_accum) + " nodes=" + std::to_string(v.nodes);
    EXPECT_EQ(b.fast, b.full) << what;
    EXPECT_EQ(e.timeline, b.full) << what << " (the evaluation's own simulation)";
    return b.skipped;
}

TEST(SkipRepeatsTest, LoweredPlansMatchTheFullSimulation) {
    const char* models[] = {"tiny-llama", "gpt2", "llama-2-7b", "llama-3.1-8b", "mistral-7b-v0.1", "qwen2-7b",
                            "gemma-2-9b", "mixtral-8x7b", "llama-3.1-70b"};
    const core::Strategy strategies[] = {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard,
                                         core::Strategy::NoShard};
    const core::Checkpointing acs[] = {core::Checkpointing::None, core::Checkpointing::Full, core::Checkpointing::Op};
    int evaluated = 0;
    int64_t skipped = 0;
    int i = 0;
    for (const char* m : models) {
        const int nodes = std::string(m).find("70b") != std::string::npos ? 8 : 1;
        for (int k = 0; k < 5; ++k, ++i) {
            Variant v;
            v.nodes = nodes * (1 + (i % 2));
            v.strategy = strategies[(i + k) % 4];
            v.fsdp_version = 1 + (i / 2) % 2;
            v.ac = acs[(i / 3 + k) % 3];
            v.micro_batch = 1 + (i + 2 * k) % 3;
            v.grad_accum = 1 + (i / 5) % 2;
            v.seq = (i / 4 + k) % 2 ? 8192 : 2048;
            v.reshard = (i / 6 + k) % 2 ? core::ReshardMode::False : core::ReshardMode::True;
            v.offload = i % 7 == 3 ? core::Offload::Cpu : core::Offload::None;
            v.prefetch_depth = 1 + (i % 3 == 2);
            const int64_t s = checkPlan(m, v);
            evaluated += s >= 0;
            skipped += std::max<int64_t>(0, s);
        }
    }
    EXPECT_GE(evaluated, 30);
    EXPECT_GT(skipped, 0);
}

// The benchmark's plan (Llama-3.1-8B per block on 8 H100s): most of its 32 blocks are copied.
TEST(SkipRepeatsTest, TheBenchmarkPlanSkipsMostBlocks) {
    EXPECT_GE(checkPlan("llama-3.1-8b", Variant{}), 40);
}

}  // namespace
}  // namespace shardcast::sim
