// core::MemoryTimer::keepReplays: a replay whose calls, steady state and allocator settings equal a
// kept one's is answered with that one's figures, and only then (every figure equal to a fresh
// replay's; anything that differs - the tape, the device limit - replays again).
#include <memory>

#include <gtest/gtest.h>

#include "core/memory/timed_memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

core::Plan llama8b(int64_t seq, core::Checkpointing ac) {
    auto model = core::resolveModel("llama-3.1-8b");
    EXPECT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.training.seq_len = seq;
    plan.training.ac = ac;
    return plan;
}

TEST(KeptReplaysTest, SameCallsReuseTheFiguresAndOnlyThen) {
    EvaluationOptions options;
    options.reserved_memory = false;
    Evaluator evaluator;
    Evaluation a, b, a_again;
    const core::Plan plan_a = llama8b(4096, core::Checkpointing::None);
    const core::Plan plan_b = llama8b(4096, core::Checkpointing::Full);
    ASSERT_TRUE(evaluator.evaluate(plan_a, nullptr, options, a).ok());
    ASSERT_TRUE(evaluator.evaluate(plan_b, nullptr, options, b).ok());
    ASSERT_TRUE(evaluator.evaluate(plan_a, nullptr, options, a_again).ok());  // its own Program: the same calls

    auto replay = [](core::MemoryTimer& timer, const Evaluation& e, const core::AllocatorConfig& config) {
        core::TimedMemory timed;
        timer.compute(e.program, e.timeline, timed);
        core::CachingAllocatorModel model;
        core::ReservedMemory out;
        timer.replayAllocator(e.program, e.timeline, config, model, out);
        return out;
    };
    core::AllocatorConfig config;
    config.limit_bytes = int64_t{78} * core::kGiB;
    core::MemoryTimer fresh;
    const core::ReservedMemory ra = replay(fresh, a, config), rb = replay(fresh, b, config);
    ASSERT_NE(ra, rb);

    core::MemoryTimer kept;
    kept.keepReplays(2);
    EXPECT_EQ(replay(kept, a, config), ra);
    EXPECT_EQ(replay(kept, b, config), rb);
    EXPECT_EQ(kept.replaysReused(), 0);
    EXPECT_EQ(replay(kept, a_again, config), ra);  // the same calls as a: reused
    EXPECT_EQ(kept.replaysReused(), 1);
    core::AllocatorConfig lower = config;
    lower.limit_bytes = int64_t{40} * core::kGiB;  // another device limit: replayed
    const core::ReservedMemory limited = replay(kept, a, lower);
    EXPECT_EQ(kept.replaysReused(), 1);
    EXPECT_EQ(limited, replay(fresh, a, lower));
    EXPECT_NE(limited.stats, ra.stats);
}

}  // namespace
}  // namespace shardcast::sim
