// Interleaved1F1B (rule PP5): the rank's schedule against torch.distributed.pipelining's own, the
// lowering of several stages per rank into one Program, and the pipeline's time against a
// hand-worked timeline.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/lower/lower.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program_check.hpp"
#include "core/program/program_io.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/pipeline.hpp"
#include "simulator/pytorch_code.hpp"
#include "tests/simulator/program_builder.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

using testing::kMs;

std::string names(const std::vector<core::PipelineStep>& steps) {
    std::string s;
    for (const core::PipelineStep& a : steps) s += (s.empty() ? "" : " ") + core::pipelineStepName(a);
    return s;
}

// torch 2.15's ScheduleInterleaved1F1B, lowered by its own passes: the expected strings are
// what torch printed for `_add_reduce_grad(_add_unshard_reshard(
// ScheduleInterleaved1F1B._calculate_single_rank_operations(rank), max_active_stages=3), M)`
// (WAIT_REDUCE_GRAD, which follows each REDUCE_GRAD, left out):
// `scripts/torch-pipeline-order.py 2,2,4 4,2,8 2,4,4 4,2,6`.
TEST(PipelineInterleavedTest, RankScheduleIsTorchs) {
    using core::PpSchedule;
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::Interleaved1F1B, 2, 2, 4, 0)),
              "0UNSHARD 2UNSHARD 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 2REDUCE_GRAD 2RESHARD 0B2 "
              "0B3 0REDUCE_GRAD 0RESHARD");
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::Interleaved1F1B, 2, 2, 4, 1)),
              "1UNSHARD 3UNSHARD 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 3REDUCE_GRAD 3RESHARD 1B2 "
              "1B3 1REDUCE_GRAD 1RESHARD");
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::Interleaved1F1B, 4, 2, 8, 2)),
              "2UNSHARD 6UNSHARD 2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 6F5 "
              "2B3 6F6 6B4 6F7 6B5 6B6 6B7 6REDUCE_GRAD 6RESHARD 2B4 2B5 2B6 2B7 2REDUCE_GRAD 2RESHARD");
    // Four stages per rank: more than max_active_stages 3, so stages are resharded and unsharded
    // again during the step.
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::Interleaved1F1B, 2, 4, 4, 1)),
              "1UNSHARD 3UNSHARD 5UNSHARD 1F0 1F1 1RESHARD 7UNSHARD 3F0 3F1 3RESHARD 1UNSHARD 5F0 5F1 7F0 7B0 7F1 "
              "7B1 7RESHARD 3UNSHARD 1F2 5B0 1F3 5B1 3F2 3B0 3F3 3B1 3RESHARD 7UNSHARD 5F2 1B0 5F3 1B1 1RESHARD "
              "3UNSHARD 7F2 7B2 7F3 7B3 7REDUCE_GRAD 7RESHARD 1UNSHARD 5B2 5B3 5REDUCE_GRAD 5RESHARD 3B2 3B3 "
              "3REDUCE_GRAD 3RESHARD 1B2 1B3 1REDUCE_GRAD 1RESHARD");
    // M = 6 over pp 4: one round of 6 (ScheduleInterleaved1F1B's flexible rounds).
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::Interleaved1F1B, 4, 2, 6, 1)),
              "1UNSHARD 5UNSHARD 1F0 1F1 1F2 1F3 1F4 1F5 5F0 5F1 5F2 5F3 5F4 5B0 5F5 5B1 5B2 5B3 5B4 5B5 "
              "5REDUCE_GRAD 5RESHARD 1B0 1B1 1B2 1B3 1B4 1B5 1REDUCE_GRAD 1RESHARD");
    // The single-stage schedules end with their one REDUCE_GRAD.
    EXPECT_EQ(names(core::pipelineRankSchedule(PpSchedule::OneFOneB, 4, 1, 6, 1)),
              "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5 1REDUCE_GRAD");
}

core::Plan interleavedPlan(int layers, int pp, int v, int grad_accum) {
    return testing::ppPlan(layers, pp, grad_accum, v > 1 ? core::PpSchedule::Interleaved1F1B : core::PpSchedule::OneFOneB,
                           8, v);
}

core::Program rankProgram(const core::Plan& plan, int rank) { return testing::stageProgram(plan, rank); }

// One Program per rank holds its stages (Task::chunk): every stage runs each micro-batch's
// forward and backward, receives and sends as its place in the whole pipeline says (stage 3 of 4
// sends nothing forward; rank 1's stage 1 sends to rank 0's stage 2, wrapping around), and the
// Program checks and round-trips.
TEST(PipelineInterleavedTest, RankProgramHoldsItsStages) {
    const core::Plan plan = interleavedPlan(6, 2, 2, 4);
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    EXPECT_EQ(mesh->stage_blocks, (std::vector<int>{1, 2, 2, 1}));  // 8 = 2 each, embedding and output one each
    for (int rank = 0; rank < 2; ++rank) {
        const core::Program p = rankProgram(plan, rank);
        ASSERT_TRUE(core::validateProgram(p).ok()) << core::validateProgram(p).error().message;
        EXPECT_EQ(p.pp_virtual, 2);
        EXPECT_EQ(p.pp_stage, rank);
        std::map<std::pair<int, int>, int> count;  // (stage, kind) -> tasks
        for (const core::Task& t : p.tasks) ++count[{p.stageOf(t), static_cast<int>(t.kind)}];
        for (int c = 0; c < 2; ++c) {
            const int g = c * 2 + rank;
            auto n = [&](core::TaskKind k) { return count[{g, static_cast<int>(k)}]; };
            EXPECT_EQ(n(core::TaskKind::Recv), (g > 0 ? 4 : 0) + (g < 3 ? 4 : 0)) << g;
            EXPECT_EQ(n(core::TaskKind::Send), (g < 3 ? 4 : 0) + (g > 0 ? 4 : 0)) << g;
            EXPECT_GE(n(core::TaskKind::Forward), 4) << g;
            EXPECT_GE(n(core::TaskKind::Backward), 4) << g;
            EXPECT_EQ(n(core::TaskKind::OptimizerStep), 1) << g;  // one optimizer per model part
        }
        auto back = core::programFromJson(core::programToJson(p), "test");
        ASSERT_TRUE(back.ok()) << back.error().message;
        EXPECT_EQ(*back, p);
    }
}

// PP5: with two stages per rank (at most three active) each unit is all-gathered once per step,
// by UNSHARD before the stage first computes; each stage's reduce-scatters follow its own last
// backward (stage 2's come before stage 0's last backward); with four stages per rank the
// RESHARDs make stages gather again: rank 1 of pp 2 x 4 unshards stages 1 and 3 three times,
// 5 once and 7 twice (the schedule above).
TEST(PipelineInterleavedTest, FsdpGathersPerUnshardAndReducesPerStage) {
    const core::Program p = rankProgram(interleavedPlan(6, 2, 2, 4), 0);
    std::map<int, int> gathers_of_unit;
    int32_t stage0_last_backward = -1, stage2_first_reduce = -1;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind == core::TaskKind::AllGather) ++gathers_of_unit[t.unit];
        if (t.kind == core::TaskKind::Backward && p.stageOf(t) == 0) stage0_last_backward = id;
        if (t.kind == core::TaskKind::ReduceScatter && p.stageOf(t) == 2 && stage2_first_reduce < 0) stage2_first_reduce = id;
    }
    EXPECT_EQ(gathers_of_unit.size(), p.units.size());
    for (const auto& [unit, n] : gathers_of_unit) EXPECT_EQ(n, 1) << p.units[static_cast<size_t>(unit)].name;
    ASSERT_GE(stage2_first_reduce, 0);
    EXPECT_LT(stage2_first_reduce, stage0_last_backward);

    const core::Program four = rankProgram(interleavedPlan(14, 2, 4, 4), 1);
    std::map<int, int> gathers_of_stage, units_of_stage;
    for (const core::Task& t : four.tasks) {
        if (t.kind == core::TaskKind::AllGather) ++gathers_of_stage[four.stageOf(t)];
    }
    // Each stage's units are contiguous in the Program, its root first.
    int stage = -1;
    for (const core::UnitInfo& u : four.units) {
        if (u.is_root) stage += 2;  // rank 1 holds stages 1, 3, 5, 7
        ++units_of_stage[stage];
    }
    ASSERT_EQ(units_of_stage.size(), 4u);
    EXPECT_EQ(gathers_of_stage[1], 3 * units_of_stage[1]);
    EXPECT_EQ(gathers_of_stage[3], 3 * units_of_stage[3]);
    EXPECT_EQ(gathers_of_stage[5], 1 * units_of_stage[5]);
    EXPECT_EQ(gathers_of_stage[7], 2 * units_of_stage[7]);
}

// Synthetic ranks of pp 2 x 2 stages, each stage's forward 1 ms and backward 2 ms per
// micro-batch, free transfers, following torch's schedule for M = 4 (RankScheduleIsTorchs).
// Worked by hand, with F/B waiting for the previous stage's forward / next stage's backward:
//   rank 0: 0F0 0-1, 0F1 1-2, 2F0 2-3, 2F1 3-4, 0F2 4-5, 2B0 6-8, 0F3 8-9, 2B1 9-11, 2F2 11-12,
//           0B0 12-14, 2F3 14-15, 0B1 15-17, 2B2 18-20, 2B3 21-23, 0B2 23-25, 0B3 25-27
//   rank 1: 1F0 1-2, 1F1 2-3, 3F0 3-4, 3B0 4-6, 3F1 6-7, 3B1 7-9, 1F2 9-10, 1B0 10-12, 1F3 12-13,
//           1B1 13-15, 3F2 15-16, 3B2 16-18, 3F3 18-19, 3B3 19-21, 1B2 21-23, 1B3 23-25
// a step of 27 ms, against 1F1B's (M + pp - 1)(f + b) = 5 x 6 = 30 ms for stages twice as long.
TEST(PipelineInterleavedTest, InterleavedBubbleIsHandWorked) {
    const int pp = 2, v = 2, m = 4;
    std::vector<core::Program> ranks;
    for (int r = 0; r < pp; ++r) {
        testing::ProgramBuilder b(1);
        core::Program& p = b.program();
        p.world_size = pp;
        p.pp_size = pp;
        p.pp_virtual = v;
        p.pp_stage = r;
        p.micro_batches = m;
        p.groups.push_back(core::ProcessGroup{core::GroupKind::Pipeline, pp, 1, 1});
        auto p2p = [&](core::TaskKind kind, bool backward, int chunk, int mb, std::initializer_list<int32_t> deps) {
            const bool to_next = (kind == core::TaskKind::Send) != backward;
            const int32_t id = b.add(kind, to_next ? core::Stream::PipelineNext : core::Stream::PipelinePrev, -1, deps);
            core::Task& t = b.task(id);
            t.peer = static_cast<int8_t>(to_next ? 1 : -1);
            t.chunk = static_cast<int8_t>(chunk);
            t.micro_batch = static_cast<int16_t>(mb);
            t.group = 0;
            t.group_size = 2;
            t.group_nodes = 1;
            return id;
        };
        for (const core::PipelineStep& a : core::pipelineRankSchedule(core::PpSchedule::Interleaved1F1B, pp, v, m, r)) {
            if (a.op != core::PipelineOp::Forward && a.op != core::PipelineOp::Backward) continue;
            const bool backward = a.op == core::PipelineOp::Backward;
            const int chunk = a.stage / pp;
            const bool receives = backward ? a.stage < pp * v - 1 : a.stage > 0;
            const bool sends = backward ? a.stage > 0 : a.stage < pp * v - 1;
            const int32_t rcv = receives ? p2p(core::TaskKind::Recv, backward, chunk, a.mb, {}) : -1;
            const int64_t flops = backward ? testing::kTwoMsFlops : testing::kTwoMsFlops / 2;
            const core::TaskKind kind = backward ? core::TaskKind::Backward : core::TaskKind::Forward;
            const int32_t c = rcv >= 0 ? b.compute(kind, 0, flops, {rcv}) : b.compute(kind, 0, flops);
            b.task(c).micro_batch = static_cast<int16_t>(a.mb);
            b.task(c).chunk = static_cast<int8_t>(chunk);
            if (sends) p2p(core::TaskKind::Send, backward, chunk, a.mb, {c});
        }
        ranks.push_back(std::move(p));
    }
    HardwareProfile profile = testing::roundProfile();
    profile.gpu.intra_node_latency_s = 0;
    Simulator simulator(profile);
    PipelineTimer timer;
    std::vector<core::Timeline> timelines;
    auto st = timer.run(simulator, ranks, timelines);
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(timelines[0].step_ns, 27 * kMs);
    EXPECT_EQ(timelines[1].step_ns, 25 * kMs);
}

// On a real plan, interleaving shrinks the bubble: the step is shorter than 1F1B's with the same
// ranks and micro-batches, while a rank holds more activations (its first stage's warm-up runs
// further ahead) and its parameters and optimizer state are the same blocks' as under 1F1B.
TEST(PipelineInterleavedTest, InterleavingShortensTheStepAndHoldsMoreActivations) {
    EvaluationOptions options;
    options.reserved_memory = false;
    auto one = evaluatePlan(interleavedPlan(14, 2, 1, 4), nullptr, options);
    ASSERT_TRUE(one.ok()) << one.error().message;
    auto inter = evaluatePlan(interleavedPlan(14, 2, 2, 4), nullptr, options);
    ASSERT_TRUE(inter.ok()) << inter.error().message;
    EXPECT_LT(inter->summary.step_s, one->summary.step_s);
    ASSERT_EQ(inter->stages.size(), 2u);
    // 1F1B: stage 0 of 16 = 14 + 2 holds 8 blocks' worth and 2 micro-batches; interleaved: rank 0
    // holds stages 0 (3 blocks) and 2 (4 blocks) and, after 0F0 0F1 2F0 2F1 0F2, 5 (stage,
    // micro-batch) pairs at once.
    EXPECT_EQ(one->stages[0].blocks, 7);
    EXPECT_EQ(inter->stages[0].blocks, 7);
    EXPECT_EQ(one->stages[0].micro_batches_held, 2);
    EXPECT_EQ(inter->stages[0].micro_batches_held, 5);
    // Step tokens over tp x pp per GPU, as under 1F1B.
    EXPECT_NEAR(inter->summary.tokens_per_s_per_gpu * inter->summary.step_s, 4.0 * 2048 / 2, 1e-6);
}

// Bad interleaved settings are refused with what is valid.
TEST(PipelineInterleavedTest, BadSettingsNameTheValidChoices) {
    auto refused = [](const core::Plan& plan, const std::string& expected) {
        auto mesh = core::validatePlan(plan);
        ASSERT_FALSE(mesh.ok()) << "accepted; expected: " << expected;
        EXPECT_NE(mesh.error().message.find(expected), std::string::npos) << mesh.error().message;
    };
    core::Plan one_stage = interleavedPlan(6, 2, 2, 4);
    one_stage.sharding.pp_virtual_stages = 1;
    refused(one_stage, "needs sharding.pp_virtual_stages 2 or more");
    core::Plan not_interleaved = interleavedPlan(6, 2, 2, 4);
    not_interleaved.sharding.pp_schedule = core::PpSchedule::OneFOneB;
    refused(not_interleaved, "needs sharding.pp_schedule Interleaved1F1B");
    // M = 10 over pp 4: two rounds of 5; M = 9 has two rounds that do not divide it.
    EXPECT_TRUE(core::validatePlan(interleavedPlan(14, 4, 2, 10)).ok());
    refused(interleavedPlan(14, 4, 2, 9), "grad_accum 9 is not (torch's ScheduleInterleaved1F1B refuses it); valid near it: 7, 8, 10, 12");
    refused(interleavedPlan(2, 2, 4, 4), "pp 2 x pp_virtual_stages 4 is more stages than the model's 2 blocks");
    core::Plan blocks = interleavedPlan(6, 2, 2, 4);
    blocks.sharding.pp_stage_blocks = {3, 3};
    refused(blocks, "it must list pp 2 x pp_virtual_stages 2 = 4 stages");
    core::Plan no_pp = interleavedPlan(6, 1, 1, 4);
    no_pp.sharding.pp_virtual_stages = 2;
    refused(no_pp, "need sharding.pp > 1");
}

}  // namespace
}  // namespace shardcast::sim
