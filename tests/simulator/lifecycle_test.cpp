// Init and summon_full_params (simulator/lifecycle.hpp) against figures worked by hand: Llama-3.1-70B
// on 32 H100s trains, initialises on the meta device, but cannot be materialised on a GPU before
// fully_shard, and summon_full_params fits only with offload_to_cpu; Llama-3.1-8B on 8 fits both ways.
#include <gtest/gtest.h>

#include "simulator/evaluation.hpp"
#include "simulator/lifecycle.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

// 80 blocks of 855,654,400, the embedding and LM head of 128,256 x 8,192 each, the final norm.
constexpr int64_t k70bParams = 80 * 855'654'400LL + 2 * 128'256LL * 8'192 + 8'192;
constexpr int64_t k70bRoot = 2 * 128'256LL * 8'192 + 8'192;  // the root unit: embedding, norm, head

Evaluation evaluate(const char* model, int nodes) {
    core::Plan plan = testing::h100Plan(model, nodes, 4096);
    plan.training.ac = core::Checkpointing::Full;
    plan.training.allocator = core::AllocatorMode::Expandable;
    EvaluationOptions options;
    options.per_unit = false;
    auto e = evaluatePlan(plan, nullptr, options);
    EXPECT_TRUE(e.ok()) << e.error().message;
    EXPECT_TRUE(e->lifecycle.has_value());
    return std::move(*e);
}

int64_t steady(const Evaluation& e) {
    int64_t b = 0;
    for (const int64_t v : e.program.initial) b += v;
    return b;
}

TEST(LifecycleTest, Llama70BOn32H100sInitialisesOnlyOnTheMetaDevice) {
    const Evaluation e = evaluate("llama-3.1-70b", 4);
    const LifecycleFigures& f = *e.lifecycle;
    const int64_t overhead = e.program.initial[core::index(core::MemCategory::RuntimeOverhead)];
    ASSERT_GT(overhead, 0);
    // Every dim 0 divides by 32: each rank's fp32 shard is exactly 1/32 of the model.
    EXPECT_EQ(f.init_meta_bytes, k70bParams / 32 * 4 + overhead);
    EXPECT_TRUE(f.init_meta_fits);
    // Materialised: 282,214,825,984 bytes whole, plus the root's shard being made (the largest unit's).
    EXPECT_EQ(f.stage_param_bytes, int64_t{282'214'825'984});
    EXPECT_EQ(f.init_materialized_bytes, k70bParams * 4 + k70bRoot / 32 * 4 + overhead);
    EXPECT_FALSE(f.init_materialized_fits);
    // summon_full_params: every unit whole over the steady state; offload_to_cpu: the root alone.
    EXPECT_EQ(f.largest_unit_bytes, k70bRoot * 4);
    EXPECT_EQ(f.summon_bytes, steady(e) + k70bParams * 4);
    EXPECT_FALSE(f.summon_fits);
    EXPECT_EQ(f.summon_offload_bytes, steady(e) + k70bRoot * 4);
    EXPECT_TRUE(f.summon_offload_fits);
    EXPECT_EQ(f.summon_host_bytes, k70bParams * 4);
    EXPECT_NEAR(f.summon_to_host_s, 282'214'825'984.0 / 63e9, 1e-9);  // the preset's 63 GB/s host link
    EXPECT_GT(f.summon_gather_s, 0);
}

TEST(LifecycleTest, Llama8BOn8H100sFitsEveryWay) {
    const Evaluation e = evaluate("llama-3.1-8b", 1);
    const LifecycleFigures& f = *e.lifecycle;
    EXPECT_EQ(f.stage_param_bytes, int64_t{8'030'261'248} * 4);  // 32.1 GB of a 75.67 GiB budget
    EXPECT_TRUE(f.init_materialized_fits);
    EXPECT_TRUE(f.summon_fits);
    EXPECT_LT(f.init_meta_bytes, f.init_materialized_bytes);
    EXPECT_LT(f.summon_offload_bytes, f.summon_bytes);
}

// An eval step against PyTorch's FSDPMemTracker: Llama-3.1-8B's width with 4 layers, 8 ranks, seq
// 2048, bf16 FSDP2 per block, after two training steps (AdamW state held, gradients None), one
// forward under torch.no_grad() with labels. `scripts/torch_peer.py models/llama-3.1-8b.json --world 8
// --seq 2048 --layers 4 --eval-step` (torch 2.15.0, transformers 4.57.6, FakeTensorMode on the CPU)
// gave an eval peak of 8,065,776,044 bytes, at the loss: the shards, the root unsharded (2.10 GB),
// a block's all-gather, the optimizer state and 2.64 GB of logits (bf16, fp32, log-softmax). The
// tracker counts no Runtime Overhead; within 1%.
TEST(LifecycleTest, EvalStepOfLlama8BSliceMatchesTheTracker) {
    core::Plan plan = testing::h100Plan("llama-3.1-8b", 1, 2048);
    plan.model = testing::scaledModel("llama-3.1-8b", 4);
    plan.training.hf_mask = core::HfMask::V4;
    auto e = evaluatePlan(plan, nullptr);
    ASSERT_TRUE(e.ok()) << e.error().message;
    const LifecycleFigures& f = *e->lifecycle;
    ASSERT_TRUE(f.eval_modelled);
    const int64_t overhead = e->program.initial[core::index(core::MemCategory::RuntimeOverhead)];
    const double tracker = 8'065'776'044.0;
    EXPECT_NEAR(static_cast<double>(f.eval_peak_bytes - overhead) / tracker, 1.0, 0.01);
    EXPECT_LT(f.eval_peak_bytes, e->memory.peak_bytes);  // nothing kept for backward
    // Its time is the step's forward phase: the end of the last forward task of micro-batch 0.
    int32_t last_forward = -1;
    for (int32_t id = 0; id < e->program.size(); ++id) {
        const core::Task& t = e->program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch == 0 && t.kind == core::TaskKind::Forward) last_forward = id;
    }
    EXPECT_EQ(f.eval_ns, e->timeline.tasks[static_cast<size_t>(last_forward)].end_ns);
    EXPECT_LT(f.eval_ns, e->timeline.step_ns / 2);  // backward costs about twice the forward
}

}  // namespace
}  // namespace shardcast::sim
