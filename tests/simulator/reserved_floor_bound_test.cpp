// core::reservedFloorBytes is a lower bound on the judged peak (reserved + Runtime Overhead) of
// every lowered plan whose allocator replay releases nothing: checked against the replay over
// models, strategies, checkpointing, micro-batches, accumulation, reshard_after_forward and both
// allocator modes. The optimizer prunes by it (search/optimize.cpp), so a plan where it is
// above the replay would be wrongly ruled out.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/memory/reserved_floor.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

TEST(ReservedFloorBoundTest, NeverAboveTheReplayedPeakAndAboveTheAllocatedPeakSomewhere) {
    const char* models[] = {"tiny-llama", "gpt2", "llama-2-7b", "llama-3.1-8b", "mixtral-8x7b"};
    const core::Strategy strategies[] = {core::Strategy::FullShard, core::Strategy::ShardGradOp, core::Strategy::HybridShard,
                                         core::Strategy::NoShard};
    const core::Checkpointing acs[] = {core::Checkpointing::None, core::Checkpointing::Op, core::Checkpointing::Full};
    int checked = 0, above_allocated = 0;
    int i = 0;
    for (const char* name : models) {
        auto model = core::resolveModel(name);
        ASSERT_TRUE(model) << name;
        auto shared = std::make_shared<const core::Model>(std::move(*model));
        for (int k = 0; k < 8; ++k, ++i) {
            core::Plan plan;
            plan.model = shared;
            plan.model_ref = name;
            plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
            plan.cluster.nodes = std::string(name) == "mixtral-8x7b" ? 2 : 1;
            plan.cluster.gpus_per_node = 8;
            plan.training.seq_len = (i % 2) ? 4096 : 2048;
            plan.training.micro_batch = 1 + (i / 2) % 2;
            plan.training.grad_accum = 1 + (i / 3) % 2;
            plan.training.ac = acs[(i + k) % 3];
            plan.training.allocator = (i / 4) % 2 ? core::AllocatorMode::Expandable : core::AllocatorMode::Caching;
            plan.sharding.strategy = strategies[(i + 2 * k) % 4];
            plan.sharding.fsdp_version = 1 + (i / 5) % 2;
            plan.sharding.reshard_after_forward = (i / 3) % 2 ? core::ReshardMode::False : core::ReshardMode::Default;
            plan.sharding.wrap.kind = core::WrapKind::Block;
            Evaluator evaluator;
            Evaluation e;
            EvaluationOptions options;
            options.issue_order_memory = false;
            options.per_unit = false;
            if (!evaluator.evaluate(plan, nullptr, options, e).ok()) continue;  // a plan the planner refuses
            const core::AllocatorStats& a = e.reserved.stats;
            if (a.releases > 0 || a.out_of_memory) continue;  // outside the bound's premise
            const int64_t floor = core::reservedFloorBytes(e.program, e.timed);
            EXPECT_LE(floor, e.fit.reserved_bytes) << name << " variant " << i;
            EXPECT_GE(floor, e.timed.peak_bytes) << name << " variant " << i;
            ++checked;
            above_allocated += floor > e.timed.peak_bytes;
        }
    }
    EXPECT_GE(checked, 25);
    EXPECT_GT(above_allocated, 0);  // the per-stream bound says more than the allocated peak somewhere
}

}  // namespace
}  // namespace shardcast::sim
