// The fast allocator replay (core/memory/allocator_replay.hpp, PeriodicReplay) gives exactly the full
// replay's ReservedMemory on lowered plans: every bundled model the planner accepts, across
// strategies, FSDP versions, activation checkpointing, micro-batches, sequence lengths,
// reshard_after_forward and allocator modes, and plans near and past the device's memory.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/memory/timed_memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

struct Variant {
    core::Strategy strategy = core::Strategy::FullShard;
    int fsdp_version = 2;
    core::Checkpointing ac = core::Checkpointing::None;
    int ac_every = 1;
    int64_t micro_batch = 1;
    int64_t grad_accum = 1;
    bool no_sync = false;
    int64_t seq = 2048;
    core::ReshardMode reshard = core::ReshardMode::Default;
    core::AllocatorMode allocator = core::AllocatorMode::Caching;
    int nodes = 1;
    core::WrapKind wrap = core::WrapKind::Block;
};

std::string describe(const std::string& model, const Variant& v) {
    return model + " " + std::string(core::strategyName(v.strategy)) + " fsdp" + std::to_string(v.fsdp_version) + " ac=" +
           core::acString(v.ac, v.ac_every) + " mb=" + std::to_string(v.micro_batch) + " accum=" + std::to_string(v.grad_accum) +
           (v.no_sync ? " no_sync" : "") +
           " seq=" + std::to_string(v.seq) + " reshard=" + std::to_string(static_cast<int>(v.reshard)) + " " +
           std::string(core::allocatorModeName(v.allocator)) + " nodes=" + std::to_string(v.nodes) +
           (v.wrap == core::WrapKind::Whole ? " wrap=whole" : "");
}

std::string fields(const core::AllocatorStats& s) {
    std::ostringstream out;
    out << "allocated " << s.allocated_bytes << " reserved " << s.reserved_bytes << " peak_allocated " << s.peak_allocated_bytes
        << " peak_reserved " << s.peak_reserved_bytes << " frag_at_peak " << s.fragmentation_at_reserved_peak << " max_frag "
        << s.max_fragmentation_bytes << " segments " << s.segments << " releases " << s.releases << " oom " << s.out_of_memory
        << " by stream, reserved/allocated (at the allocated peak):";
    for (size_t i = 0; i < s.reserved_by_stream.size(); ++i) {
        out << " " << s.reserved_by_stream[i] << "/" << s.allocated_by_stream[i] << " (" << s.reserved_by_stream_at_peak[i] << "/"
            << s.allocated_by_stream_at_peak[i] << ")";
    }
    return out.str();
}

struct Outcome {
    bool evaluated = false;
    int64_t skipped_periods = 0;      // by FastEveryStep
    bool second_step_skipped = false;  // by Fast
    core::AllocatorStats stats;
};

// Evaluates the plan (which runs the fast replay), replays the same program in full, and
// compares; returns what the fast replay did.
Outcome check(const std::string& model_name, const Variant& v) {
    Outcome outcome;
    auto model = core::resolveModel(model_name);
    if (!model) return outcome;
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = v.nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = v.seq;
    plan.training.micro_batch = v.micro_batch;
    plan.training.grad_accum = v.grad_accum;
    plan.training.no_sync = v.no_sync;
    plan.training.ac = v.ac;
    plan.training.ac_every = v.ac_every;
    plan.training.allocator = v.allocator;
    plan.sharding.strategy = v.strategy;
    plan.sharding.fsdp_version = v.fsdp_version;
    plan.sharding.reshard_after_forward = v.reshard;
    plan.sharding.wrap.kind = v.wrap;
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    if (!evaluator.evaluate(plan, nullptr, options, e).ok()) return outcome;  // a plan the planner refuses
    core::MemoryTimer timer;
    core::TimedMemory timed;
    timer.compute(e.program, e.timeline, timed);
    core::CachingAllocatorModel allocator;
    core::ReservedMemory full, every, fast;
    timer.replayAllocator(e.program, e.timeline, e.reserved.config, allocator, full, core::AllocatorReplay::Full);
    timer.replayAllocator(e.program, e.timeline, e.reserved.config, allocator, every, core::AllocatorReplay::FastEveryStep);
    outcome.skipped_periods = timer.allocatorReplay().lastSkippedPeriods();
    timer.replayAllocator(e.program, e.timeline, e.reserved.config, allocator, fast, core::AllocatorReplay::Fast);
    outcome.second_step_skipped = timer.stepReplay().secondStepSkipped();
    const std::string what = describe(model_name, v);
    EXPECT_EQ(every, full) << what << "\n fast (every step): " << fields(every.stats) << "\n full: " << fields(full.stats);
    EXPECT_EQ(fast, full) << what << "\n fast: " << fields(fast.stats) << "\n full: " << fields(full.stats);
    EXPECT_EQ(e.reserved, full) << what << " (the evaluation's own replay)";
    outcome.evaluated = true;
    outcome.stats = full.stats;
    return outcome;
}

// Every model at one base plan, then each dimension varied in turn from a rotating base, so that
// every value of every dimension meets several models and other dimensions' values.
TEST(FastReplayEqualityTest, EveryModelAndDimensionMatchesTheFullReplay) {
    const char* models[] = {"tiny-llama", "tiny-gpt2", "gpt2", "pythia-160m", "llama-2-7b", "llama-3.1-8b", "mistral-7b-v0.1",
                            "qwen2-7b", "gemma-2-9b", "mixtral-8x7b", "llama-3.1-70b", "llama-3.1-405b"};
    const core::Strategy strategies[] = {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard,
                                         core::Strategy::NoShard};
    const std::pair<core::Checkpointing, int> acs[] = {{core::Checkpointing::None, 1},
                                                       {core::Checkpointing::Op, 1},
                                                       {core::Checkpointing::Full, 1},
                                                       {core::Checkpointing::Layer, 2}};
    const int64_t micro_batches[] = {1, 2, 4};
    const int64_t seqs[] = {2048, 8192};
    const core::ReshardMode reshards[] = {core::ReshardMode::True, core::ReshardMode::False};
    const core::AllocatorMode allocators[] = {core::AllocatorMode::Caching, core::AllocatorMode::Expandable};
    int evaluated = 0;
    int64_t skipped = 0;
    int second_steps = 0;
    int i = 0;
    for (const char* m : models) {
        // Big models need more GPUs to be accepted; the node count is part of the variation.
        const int nodes = std::string(m).find("405b") != std::string::npos ? 64 : std::string(m).find("70b") != std::string::npos ? 8 : 1;
        for (int k = 0; k < 6; ++k, ++i) {
            Variant v;
            v.nodes = nodes * (1 + (i % 2));
            v.strategy = strategies[(i + k) % 4];
            v.fsdp_version = 1 + (i / 2) % 2;
            v.ac = acs[(i / 3 + k) % 4].first;
            v.ac_every = acs[(i / 3 + k) % 4].second;
            v.micro_batch = micro_batches[(i + 2 * k) % 3];
            v.grad_accum = 1 + (i / 5) % 2;
            v.seq = seqs[(i / 4 + k) % 2];
            v.reshard = reshards[(i / 6 + k) % 2];
            v.allocator = allocators[(i / 7 + k) % 2];
            const Outcome o = check(m, v);
            evaluated += o.evaluated;
            skipped += o.skipped_periods;
            second_steps += o.second_step_skipped;
        }
    }
    EXPECT_GE(evaluated, 40);  // most of the matrix is accepted by the planner
    EXPECT_GT(skipped, 0);     // and the fast path did skip somewhere
    EXPECT_GT(second_steps, 0);  // and did not replay the second step somewhere
    std::printf("%d plans, second step proven on %d\n", evaluated, second_steps);
}

// Llama-3.1-8B on 8 GPUs at 8,192 tokens (the benchmark's plan) comes within the allocator's reach
// of the device: cached segments are released (releases > 0). Twice the batch goes past it.
TEST(FastReplayEqualityTest, NearAndPastTheDeviceLimit) {
    Variant near;
    near.seq = 8192;
    const Outcome a = check("llama-3.1-8b", near);
    ASSERT_TRUE(a.evaluated);
    EXPECT_GT(a.stats.releases, 0);
    EXPECT_FALSE(a.stats.out_of_memory);
    EXPECT_GT(a.skipped_periods, 0);
    Variant past = near;
    past.micro_batch = 2;
    const Outcome b = check("llama-3.1-8b", past);
    ASSERT_TRUE(b.evaluated);
    EXPECT_TRUE(b.stats.out_of_memory);
    for (core::AllocatorMode mode : {core::AllocatorMode::Caching, core::AllocatorMode::Expandable}) {
        for (int64_t mb : {1, 2, 3}) {
            Variant v = near;
            v.allocator = mode;
            v.micro_batch = mb;
            check("llama-3.1-8b", v);
        }
    }
}

// Gradient accumulation of 2 and 4 micro-batches, with and without no_sync, across models,
// strategies, FSDP versions, checkpointing and reshard modes: the blocks the fast replay skips
// inside each micro-batch (it does, somewhere) leave the full replay's figures.
TEST(FastReplayEqualityTest, GradientAccumulationMatchesTheFullReplay) {
    const char* models[] = {"tiny-llama", "gpt2", "llama-3.1-8b", "mixtral-8x7b"};
    const core::Strategy strategies[] = {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard};
    const core::Checkpointing acs[] = {core::Checkpointing::None, core::Checkpointing::Full, core::Checkpointing::Op};
    int evaluated = 0;
    int64_t skipped = 0;
    int second_steps = 0;
    int i = 0;
    for (const char* m : models) {
        for (int64_t accum : {2, 4}) {
            for (bool no_sync : {false, true}) {
                for (int k = 0; k < 2; ++k, ++i) {
                    Variant v;
                    v.grad_accum = accum;
                    v.no_sync = no_sync;
                    v.strategy = strategies[i % 3];
                    v.fsdp_version = 1 + (i / 3) % 2;
                    v.ac = acs[(i + k) % 3];
                    v.micro_batch = 1 + (i / 2) % 2;
                    v.seq = k == 0 ? 2048 : 4096;
                    v.reshard = (i / 4) % 2 == 0 ? core::ReshardMode::True : core::ReshardMode::False;
                    v.allocator = (i / 5) % 2 == 0 ? core::AllocatorMode::Caching : core::AllocatorMode::Expandable;
                    const Outcome o = check(m, v);
                    evaluated += o.evaluated;
                    skipped += o.skipped_periods;
                    second_steps += o.second_step_skipped;
                }
            }
        }
    }
    EXPECT_GE(evaluated, 24);
    EXPECT_GT(skipped, 0);
    EXPECT_GT(second_steps, 0);
    std::printf("%d plans, second step proven on %d\n", evaluated, second_steps);
}

// Mixtral-8x7B as one FSDP unit at 8,192 tokens: without the proof's check of what a reference
// leaves behind (core/memory/allocator_replay.hpp, condition 4: no free block it leaves could change a
// best fit) the fast replay differs from the full one on these plans; no other test here fails
// without that check.
TEST(FastReplayEqualityTest, WholeModelUnitsWhoseLeftoverBlocksWouldBeBestFits) {
    int evaluated = 0;
    const core::Strategy strategies[] = {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard,
                                         core::Strategy::NoShard};
    for (core::Strategy strategy : strategies) {
        for (int64_t accum : {1, 4}) {
            Variant v;
            v.wrap = core::WrapKind::Whole;
            v.seq = 8192;
            v.strategy = strategy;
            v.grad_accum = accum;
            evaluated += check("mixtral-8x7b", v).evaluated;
        }
    }
    EXPECT_GE(evaluated, 2);
}

}  // namespace
}  // namespace shardcast::sim
