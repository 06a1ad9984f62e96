// Pipeline parallelism: torchtitan's stage split, the stage models, the schedules' task order
// (GPipe, 1F1B), FSDP inside a stage (PP1, PP3), the P2P tasks (PP4) and the pipeline's time
// across stages against hand-worked bubbles.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program_check.hpp"
#include "core/program/program_io.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"
#include "simulator/pipeline.hpp"
#include "simulator/pytorch_code.hpp"
#include "tests/simulator/program_builder.hpp"

namespace shardcast::sim {
namespace {

using testing::kMs;

std::shared_ptr<const core::Model> llama8b(int layers) { return testing::scaledModel("llama-3.1-8b", layers); }

using testing::ppPlan;

core::Program stage(const core::Plan& plan, int s) { return testing::stageProgram(plan, s); }

// torchtitan's generate_llm_fqn_per_model_part, worked by hand: the embedding and the output
// count as one block each, blocks + 2 split evenly, the first (blocks + 2) mod pp stages one more.
TEST(PipelineTest, StageSplitIsTorchtitans) {
    auto split = [](int pp, int64_t blocks) {
        auto s = core::pipelineStageBlocks(pp, blocks, {});
        EXPECT_TRUE(s.ok()) << s.error().message;
        return s.ok() ? *s : std::vector<int>{};
    };
    EXPECT_EQ(split(4, 32), (std::vector<int>{8, 9, 8, 7}));   // 34 = 9 + 9 + 8 + 8
    EXPECT_EQ(split(2, 3), (std::vector<int>{2, 1}));          // 5 = 3 + 2
    EXPECT_EQ(split(8, 126), (std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15}));  // 405B: 128 = 8 x 16
    EXPECT_EQ(split(4, 2), (std::vector<int>{0, 1, 1, 0}));    // 4 = 1 each: embedding alone, output alone
    EXPECT_FALSE(core::pipelineStageBlocks(5, 2, {}).ok());    // more stages than 2 + 2
    EXPECT_EQ(*core::pipelineStageBlocks(3, 10, {4, 4, 2}), (std::vector<int>{4, 4, 2}));
    auto wrong_sum = core::pipelineStageBlocks(3, 10, {4, 4, 4});
    ASSERT_FALSE(wrong_sum.ok());
    EXPECT_NE(wrong_sum.error().message.find("sum to the model's 10 blocks"), std::string::npos);
    auto empty_middle = core::pipelineStageBlocks(3, 10, {5, 0, 5});
    ASSERT_FALSE(empty_middle.ok());
    EXPECT_NE(empty_middle.error().message.find("stage 1 holds no block"), std::string::npos);
}

// Each stage holds its blocks; the embedding is on the first, the norm and the output on the
// last; together they hold the model's parameters once.
TEST(PipelineTest, StageModelsPartitionTheParameters) {
    auto model = llama8b(6);
    const std::vector<std::pair<int, int>> ranges = {{0, 2}, {2, 4}, {4, 6}};
    int64_t params = 0;
    for (size_t s = 0; s < ranges.size(); ++s) {
        const core::Model m =
            core::pipelineStageModel(*model, ranges[s].first, ranges[s].second, s == 0, s + 1 == ranges.size());
        EXPECT_EQ(m.blocks.size(), 2u);
        params += m.numParams();
        bool embed = false, head = false;
        for (const core::Param& p : m.params) {
            embed = embed || p.name == "model.embed_tokens.weight";
            head = head || p.name == "lm_head.weight";
        }
        EXPECT_EQ(embed, s == 0) << s;
        EXPECT_EQ(head, s + 1 == ranges.size()) << s;
        EXPECT_EQ(m.modules[static_cast<size_t>(m.blocks[0])].name, "model.layers." + std::to_string(2 * s));
        for (const core::Op& op : m.ops) EXPECT_LT(op.module, static_cast<int32_t>(m.modules.size()));
    }
    EXPECT_EQ(params, model->numParams());
}

// The forward and backward passes of a stage, in the order its schedule runs them.
std::string passOrder(const core::Program& p) {
    std::string out;
    int last_mb = -1;
    bool last_bwd = false;
    for (const core::Task& t : p.tasks) {
        const bool fwd = t.kind == core::TaskKind::Forward, bwd = t.kind == core::TaskKind::Backward;
        if (!fwd && !bwd) continue;
        if (t.micro_batch == last_mb && bwd == last_bwd) continue;
        last_mb = t.micro_batch;
        last_bwd = bwd;
        out += (bwd ? "B" : "F") + std::to_string(t.micro_batch) + " ";
    }
    return out;
}

// Schedule1F1B: stage s runs min(M, pp - s) forwards, then backward and forward alternately,
// then the remaining backwards; GPipe every forward, then every backward (schedules.py).
TEST(PipelineTest, SchedulesOrderThePasses) {
    const core::Plan one = ppPlan(6, 4, 6, core::PpSchedule::OneFOneB);
    EXPECT_EQ(passOrder(stage(one, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
    EXPECT_EQ(passOrder(stage(one, 1)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
    EXPECT_EQ(passOrder(stage(one, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
    const core::Plan gpipe = ppPlan(6, 4, 3, core::PpSchedule::GPipe);
    EXPECT_EQ(passOrder(stage(gpipe, 2)), "F0 F1 F2 B0 B1 B2 ");
}

// PP4: a middle stage receives each micro-batch's activations before its forward and sends them
// after; receives the output gradient before its backward and sends the input gradient after.
// The first stage receives no activations, the last no gradients. Sizes: the residual stream.
TEST(PipelineTest, MiddleStageSendsAndReceivesEachMicroBatch) {
    const core::Plan plan = ppPlan(6, 3, 3, core::PpSchedule::OneFOneB, 6);
    const int64_t bytes = 2048 * 4096 * 2;  // tokens x hidden x bf16
    for (int s = 0; s < 3; ++s) {
        const core::Program p = stage(plan, s);
        ASSERT_TRUE(core::validateProgram(p).ok()) << core::validateProgram(p).error().message;
        int recv_act = 0, send_act = 0, recv_grad = 0, send_grad = 0;
        for (int32_t id = 0; id < p.size(); ++id) {
            const core::Task& t = p.tasks[static_cast<size_t>(id)];
            if (!core::isP2P(t.kind)) continue;
            EXPECT_EQ(t.comm_bytes, bytes);
            const bool send = t.kind == core::TaskKind::Send;
            if (send && t.peer > 0) ++send_act;
            if (send && t.peer < 0) ++send_grad;
            if (!send && t.peer < 0) ++recv_act;
            if (!send && t.peer > 0) ++recv_grad;
            if (!send) {
                // The pass's first forward, recompute or backward task waits for the receive (a
                // copy-out of an all-gather before it need not).
                auto pass = [](core::TaskKind k) {
                    return k == core::TaskKind::Forward || k == core::TaskKind::Backward || k == core::TaskKind::Recompute;
                };
                int32_t next = id + 1;
                while (next < p.size() && !pass(p.tasks[static_cast<size_t>(next)].kind)) ++next;
                ASSERT_LT(next, p.size());
                const core::Task& c = p.tasks[static_cast<size_t>(next)];
                const int32_t* deps = p.depsBegin(c);
                EXPECT_NE(std::find(deps, deps + c.deps.count, id), deps + c.deps.count) << p.taskLabel(next);
            }
        }
        EXPECT_EQ(recv_act, s > 0 ? 3 : 0) << s;
        EXPECT_EQ(send_act, s < 2 ? 3 : 0) << s;
        EXPECT_EQ(recv_grad, s < 2 ? 3 : 0) << s;
        EXPECT_EQ(send_grad, s > 0 ? 3 : 0) << s;
        auto back = core::programFromJson(core::programToJson(p), "test");
        ASSERT_TRUE(back.ok()) << back.error().message;
        EXPECT_EQ(*back, p);
    }
}

// PP1 and PP3: parameters stay unsharded after forward and backward, so each unit all-gathers
// once per step; gradients accumulate unsharded and every reduce-scatter runs after the stage's
// last backward, once per unit.
TEST(PipelineTest, FsdpInsideAStageGathersAndReducesOncePerStep) {
    const core::Plan plan = ppPlan(6, 2, 4, core::PpSchedule::OneFOneB);
    const core::Program p = stage(plan, 0);
    int gathers = 0, reduces = 0;
    int32_t last_backward = -1, first_reduce = -1;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind == core::TaskKind::AllGather) ++gathers;
        if (t.kind == core::TaskKind::Backward) last_backward = id;
        if (t.kind == core::TaskKind::ReduceScatter) {
            ++reduces;
            if (first_reduce < 0) first_reduce = id;
        }
    }
    int units_with_grads = 0;
    for (const core::UnitInfo& u : p.units) units_with_grads += u.trainable_params > 0 ? 1 : 0;
    EXPECT_EQ(gathers, static_cast<int>(p.units.size()));
    EXPECT_EQ(reduces, units_with_grads);
    EXPECT_GT(first_reduce, last_backward);
    // reshard_after_forward true by hand brings back an all-gather per micro-batch's forward.
    core::Plan resharding = plan;
    resharding.sharding.reshard_after_forward = core::ReshardMode::True;
    const core::Program r = stage(resharding, 0);
    int r_gathers = 0;
    for (const core::Task& t : r.tasks) r_gathers += t.kind == core::TaskKind::AllGather ? 1 : 0;
    EXPECT_GT(r_gathers, gathers);
}

// A stage holds the activations of the micro-batches between their forward and backward:
// min(M, pp - stage) under 1F1B, M under GPipe.
TEST(PipelineTest, MicroBatchesHeldPerStage) {
    EvaluationOptions options;
    options.reserved_memory = false;
    auto one = evaluatePlan(ppPlan(8, 4, 8, core::PpSchedule::OneFOneB), nullptr, options);
    ASSERT_TRUE(one.ok()) << one.error().message;
    ASSERT_EQ(one->stages.size(), 4u);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(one->stages[static_cast<size_t>(s)].micro_batches_held, 4 - s);
    auto gpipe = evaluatePlan(ppPlan(8, 4, 8, core::PpSchedule::GPipe), nullptr, options);
    ASSERT_TRUE(gpipe.ok()) << gpipe.error().message;
    for (const StageFigures& f : gpipe->stages) EXPECT_EQ(f.micro_batches_held, 8);
    // Stage 0 of 1F1B holds 4 micro-batches' activations, GPipe's 8: more memory, the same FSDP state.
    EXPECT_GT(gpipe->stages[0].peak_bytes, one->stages[0].peak_bytes);
    // The step counts every rank's tokens over tp x pp (torchtitan's tokens per second per GPU).
    EXPECT_NEAR(one->summary.tokens_per_s_per_gpu * one->summary.step_s, 8.0 * 2048 / 4, 1e-6);
}

// Synthetic stages with round costs: forward f, backward b per micro-batch, transfers of c.
core::Program syntheticStage(int pp, int s, const std::vector<std::pair<bool, int>>& actions, int micro_batches,
                             int64_t fwd_flops, int64_t bwd_flops, int64_t p2p_bytes) {
    testing::ProgramBuilder b(1);
    core::Program& p = b.program();
    p.world_size = pp;
    p.pp_size = pp;
    p.pp_stage = s;
    p.micro_batches = micro_batches;
    p.groups.push_back(core::ProcessGroup{core::GroupKind::Pipeline, pp, 1, 1});
    auto p2p = [&](core::TaskKind kind, bool backward, int mb, std::initializer_list<int32_t> deps) {
        const bool to_next = (kind == core::TaskKind::Send) != backward;
        const int32_t id = b.add(kind, to_next ? core::Stream::PipelineNext : core::Stream::PipelinePrev, -1, deps);
        core::Task& t = b.task(id);
        t.peer = static_cast<int8_t>(to_next ? 1 : -1);
        t.micro_batch = static_cast<int16_t>(mb);
        t.comm_bytes = p2p_bytes;
        t.group = 0;
        t.group_size = 2;
        t.group_nodes = 1;
        return id;
    };
    for (const auto& [backward, mb] : actions) {
        const bool receives = backward ? s < pp - 1 : s > 0;
        const bool sends = backward ? s > 0 : s < pp - 1;
        const int32_t r = receives ? p2p(core::TaskKind::Recv, backward, mb, {}) : -1;
        const int32_t c = r >= 0 ? b.compute(backward ? core::TaskKind::Backward : core::TaskKind::Forward, 0,
                                             backward ? bwd_flops : fwd_flops, {r})
                                 : b.compute(backward ? core::TaskKind::Backward : core::TaskKind::Forward, 0,
                                             backward ? bwd_flops : fwd_flops);
        b.task(c).micro_batch = static_cast<int16_t>(mb);
        if (sends) p2p(core::TaskKind::Send, backward, mb, {c});
    }
    return std::move(p);
}

std::vector<std::pair<bool, int>> gpipeActions(int m) {
    std::vector<std::pair<bool, int>> a;
    for (int i = 0; i < m; ++i) a.emplace_back(false, i);
    for (int i = 0; i < m; ++i) a.emplace_back(true, i);
    return a;
}

std::vector<std::pair<bool, int>> oneFOneBActions(int pp, int s, int m) {
    std::vector<std::pair<bool, int>> a;
    const int warmup = std::min(m, pp - s);
    int f = 0, b = 0;
    for (; f < warmup; ++f) a.emplace_back(false, f);
    for (;;) {
        a.emplace_back(true, b++);
        if (f == m) break;
        a.emplace_back(false, f++);
    }
    for (; b < m; ++b) a.emplace_back(true, b);
    return a;
}

int64_t pipelineStep(const std::vector<core::Program>& stages, int pp) {
    HardwareProfile profile = testing::roundProfile();
    profile.gpu.intra_node_latency_s = 0;
    Simulator simulator(profile);
    PipelineTimer timer;
    std::vector<core::Timeline> timelines;
    auto st = timer.run(simulator, stages, timelines);
    EXPECT_TRUE(st.ok()) << st.error().message;
    int64_t step = 0;
    for (int s = 0; s < pp; ++s) step = std::max(step, timelines[static_cast<size_t>(s)].step_ns);
    return step;
}

// Identical stages, forward f = 2 ms and backward b = 4 ms per micro-batch, free transfers: both
// schedules take (M + pp - 1)(f + b), the classic bubble of pp - 1 slots: (4 + 3 - 1) x 6 = 36 ms.
TEST(PipelineTest, BubbleOfIdenticalStagesIsHandWorked) {
    const int pp = 3, m = 4;
    std::vector<core::Program> gpipe, one;
    for (int s = 0; s < pp; ++s) {
        gpipe.push_back(syntheticStage(pp, s, gpipeActions(m), m, testing::kTwoMsFlops, 2 * testing::kTwoMsFlops, 0));
        one.push_back(syntheticStage(pp, s, oneFOneBActions(pp, s, m), m, testing::kTwoMsFlops, 2 * testing::kTwoMsFlops, 0));
    }
    EXPECT_EQ(pipelineStep(gpipe, pp), 36 * kMs);
    EXPECT_EQ(pipelineStep(one, pp), 36 * kMs);
}

// With transfers of c = 1 ms (80 MB over NVLink at 100 GB/s x 0.8), GPipe's forward wave reaches
// the last stage (pp - 1)(f + c) late and the backward wave the first (pp - 1)(b + c) late:
// (M + pp - 1)(f + b) + 2 (pp - 1) c = 36 + 4 = 40 ms.
TEST(PipelineTest, TransfersAddToTheWavesHandWorked) {
    const int pp = 3, m = 4;
    std::vector<core::Program> gpipe;
    for (int s = 0; s < pp; ++s) {
        gpipe.push_back(syntheticStage(pp, s, gpipeActions(m), m, testing::kTwoMsFlops, 2 * testing::kTwoMsFlops, 80'000'000));
    }
    EXPECT_EQ(pipelineStep(gpipe, pp), 40 * kMs);
}

// Processor sharing (coreSlowdowns), by hand: two pipeline ranks of one compute task each, rank 0
// busy over [0, 10) ms and rank 1 over [5, 15) ms, on a node of 2 cores.
TEST(PipelineTest, CoreSharesAreHandWorked) {
    std::vector<core::Program> stages;
    std::vector<core::Timeline> timelines(2);
    for (int s = 0; s < 2; ++s) {
        testing::ProgramBuilder b(1);
        b.compute(core::TaskKind::Forward, 0, 1);
        stages.push_back(std::move(b.program()));
        timelines[static_cast<size_t>(s)].tasks = {core::TaskTime{5 * kMs * s, 5 * kMs * s + 10 * kMs}};
    }
    auto shares = [&](std::vector<int> host, std::vector<int> ranks) { return coreSlowdowns(timelines, stages, host, ranks, 2); };
    // 2 ranks a stage: alone 2 / 2 = 1 for 5 ms, with the other stage 4 / 2 = 2 for 5 ms: 1.5 each.
    EXPECT_NEAR(shares({0, 0}, {2, 2})[0], 1.5, 1e-12);
    EXPECT_NEAR(shares({0, 0}, {2, 2})[1], 1.5, 1e-12);
    // 4 ranks a stage: 2, then 8 / 2 = 4: 3.
    EXPECT_NEAR(shares({0, 0}, {4, 4})[0], 3.0, 1e-12);
    // 1 and 3 ranks: rank 0 computes at max(1, 1/2) = 1, then 4 / 2 = 2: 1.5; rank 1 at 2, then 3 / 2: 1.75.
    EXPECT_NEAR(shares({0, 0}, {1, 3})[0], 1.5, 1e-12);
    EXPECT_NEAR(shares({0, 0}, {1, 3})[1], 1.75, 1e-12);
    // On nodes of their own the stages share nothing: 4 ranks on 2 cores, 2 all along.
    EXPECT_NEAR(shares({0, 1}, {4, 4})[0], 2.0, 1e-12);
    EXPECT_NEAR(shares({0, 1}, {2, 2})[1], 1.0, 1e-12);
    // A rank whose compute stream is never busy gets its stage alone.
    timelines[1].tasks[0] = core::TaskTime{0, 0};
    EXPECT_NEAR(shares({0, 0}, {4, 4})[1], 2.0, 1e-12);
    EXPECT_NEAR(shares({0, 0}, {4, 4})[0], 2.0, 1e-12);
}

// A plan whose ranks share a node's cores (HardwareProfile::host_cores): without pipeline stages
// every rank computes at once, 4 ranks on 2 cores each at half its rate: the compute stream's tasks
// take exactly twice as long. With 2 stages of 2 ranks the share lies between a stage alone (1)
// and both always computing (2): 1F1B's steady state overlaps them, its warm-up and drain do not.
TEST(PipelineTest, RanksSharingCoresComputeAtTheirShare) {
    core::Plan plan = ppPlan(4, 1, 4, core::PpSchedule::OneFOneB, 4);
    HardwareProfile own = HardwareProfile::fromCluster(plan.cluster);
    own.overlap_compute_slowdown = 1;
    own.overlap_collective_slowdown = 1;
    HardwareProfile shared = own;
    shared.host_cores = 2;
    EvaluationOptions options;
    options.reserved_memory = false;
    auto busy = [&](const core::Plan& p, const HardwareProfile& profile) {
        auto e = evaluatePlan(p, &profile, options);
        EXPECT_TRUE(e.ok()) << e.error().message;
        return e.ok() ? e->timeline.busyNs(core::Stream::Compute) : 0;
    };
    const int64_t alone = busy(plan, own), sharing = busy(plan, shared);
    EXPECT_GT(alone, 0);
    EXPECT_NEAR(static_cast<double>(sharing) / static_cast<double>(alone), 2.0, 1e-6);
    // As many cores as ranks: nothing shared.
    shared.host_cores = 4;
    EXPECT_EQ(busy(plan, shared), alone);

    plan.sharding.pp = 2;
    shared.host_cores = 2;
    const int64_t stage_alone = busy(plan, own), stage_sharing = busy(plan, shared);
    const double ratio = static_cast<double>(stage_sharing) / static_cast<double>(stage_alone);
    EXPECT_GT(ratio, 1.05);
    EXPECT_LT(ratio, 1.95);
    // The evaluation says the shown rank's share, and each stage's.
    auto e = evaluatePlan(plan, &shared, options);
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_NEAR(e->core_slowdown, ratio, 1e-3);
    for (const StageFigures& f : e->stages) {
        EXPECT_GT(f.core_slowdown, 1.05);
        EXPECT_LT(f.core_slowdown, 1.95);
    }
    plan.sharding.pp = 1;
    auto flat = evaluatePlan(plan, &shared, options);
    ASSERT_TRUE(flat.ok()) << flat.error().message;
    EXPECT_EQ(flat->core_slowdown, 2.0);
}

// A receive without its send is refused, naming it.
TEST(PipelineTest, UnmatchedReceiveIsAnError) {
    std::vector<core::Program> stages;
    stages.push_back(syntheticStage(2, 0, {{false, 0}}, 1, testing::kTwoMsFlops, testing::kTwoMsFlops, 1000));
    stages.push_back(syntheticStage(2, 1, {{false, 0}, {false, 1}}, 2, testing::kTwoMsFlops, testing::kTwoMsFlops, 1000));
    Simulator simulator(testing::roundProfile());
    PipelineTimer timer;
    std::vector<core::Timeline> timelines;
    auto st = timer.run(simulator, stages, timelines);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("RECV act mb1"), std::string::npos) << st.error().message;
}

// Meshes that cannot be built are refused with what is valid.
TEST(PipelineTest, BadPipelinesNameTheValidChoices) {
    auto refused = [](core::Plan plan, const std::string& expected) {
        auto mesh = core::validatePlan(plan);
        ASSERT_FALSE(mesh.ok()) << "accepted; expected: " << expected;
        EXPECT_NE(mesh.error().message.find(expected), std::string::npos) << mesh.error().message;
    };
    refused(ppPlan(6, 3, 3, core::PpSchedule::OneFOneB), "sharding.pp 3 must divide the world size 8");
    refused(ppPlan(2, 8, 8, core::PpSchedule::OneFOneB), "valid: 1 to 4");
    refused(ppPlan(6, 4, 2, core::PpSchedule::OneFOneB), "training.grad_accum 2 < pp 4");
    refused(ppPlan(6, 2, 2, core::PpSchedule::Interleaved1F1B), "Interleaved1F1B needs sharding.pp_virtual_stages 2 or more");
    core::Plan blocks = ppPlan(6, 2, 2, core::PpSchedule::GPipe);
    blocks.sharding.pp_stage_blocks = {3, 2};
    refused(blocks, "sum to the model's 6 blocks");
    core::Plan fsdp1 = ppPlan(6, 2, 2, core::PpSchedule::GPipe);
    fsdp1.sharding.fsdp_version = 1;
    refused(fsdp1, "fully_shard (fsdp 2)");
    EXPECT_TRUE(core::validatePlan(ppPlan(6, 2, 1, core::PpSchedule::GPipe)).ok());
}

// plan --pytorch under pp: the 4-D mesh, the stage split, fully_shard kept unsharded after
// forward (PP1, as the lowering), the stage as the FSDP root, and the schedule over the step's
// micro-batches. scripts/check-emitted-pp.py runs such files for real under torchrun.
TEST(PipelineTest, PytorchCodeBuildsTheStagesAndTheSchedule) {
    const core::Plan plan = ppPlan(6, 4, 8, core::PpSchedule::OneFOneB);
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    const std::string code = pytorchCode(plan, *mesh, unitsOfPlan(plan));
    for (const char* want : {"init_device_mesh(\"cuda\", (4, 1, 2, 1), mesh_dim_names=(\"pp\", \"dp_replicate\", \"dp_shard\", \"tp\"))",
                             "stage_blocks = [1, 2, 2, 1]", "from torch.distributed.pipelining import PipelineStage, Schedule1F1B",
                             "reshard_after_forward=False)", "fully_shard(stage_module, mesh=mesh",
                             "stage = PipelineStage(stage_module, pp_rank, 4, device, group=world[\"pp\"].get_group())",
                             "schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=loss_fn)", "[\"model.layers.5\"],"}) {
        EXPECT_NE(code.find(want), std::string::npos) << want << "\n" << code;
    }
    core::Plan gpipe = ppPlan(6, 2, 3, core::PpSchedule::GPipe);
    gpipe.sharding.tp = 2;
    auto mesh2 = core::validatePlan(gpipe);
    ASSERT_TRUE(mesh2.ok()) << mesh2.error().message;
    const std::string code2 = pytorchCode(gpipe, *mesh2, unitsOfPlan(gpipe));
    for (const char* want : {"ScheduleGPipe(stage, n_microbatches=3", "if is_last:\n    top[\"model.norm\"] = SequenceParallel()",
                             "x = DTensor.from_local(x, tp_mesh, [Shard(1)])"}) {
        EXPECT_NE(code2.find(want), std::string::npos) << want << "\n" << code2;
    }
}

}  // namespace
}  // namespace shardcast::sim
