// Kernel shapes of compute tasks (program.hpp OpShape), worked out by hand from the model
// configs, and their FLOPs against the tasks' FLOPs.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "lowered_program.hpp"

using namespace shardcast::core;

namespace {

Plan planFor(const char* model_name, int gpus) {
    auto model = resolveModel(model_name);
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = gpus;
    plan.training.micro_batch = 1;
    plan.training.seq_len = 8192;
    plan.sharding.strategy = Strategy::FullShard;
    return plan;
}

using shardcast::core::testing::lowered;

int32_t findTask(const Program& p, TaskKind kind, const char* unit) {
    for (int32_t id = 0; id < p.size(); ++id) {
        const Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind == kind && t.unit >= 0 && p.units[static_cast<size_t>(t.unit)].name == unit) return id;
    }
    ADD_FAILURE() << "no " << taskKindName(kind) << " task of " << unit;
    return 0;
}

std::vector<OpShape> opsOf(const Program& p, int32_t id) {
    const Task& t = p.tasks[static_cast<size_t>(id)];
    return {p.opsBegin(t), p.opsBegin(t) + t.ops.count};
}

struct Gemm {
    int64_t m, n, k, batch;
    bool operator==(const Gemm&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Gemm& g) {
    return os << '[' << g.m << " x " << g.n << " x " << g.k << " x" << g.batch << ']';
}

std::vector<Gemm> gemmsOf(const std::vector<OpShape>& ops) {
    std::vector<Gemm> out;
    for (const OpShape& o : ops)
        if (o.kind == OpShapeKind::Gemm) out.push_back({o.m, o.n, o.k, o.batch});
    return out;
}

// FLOPs of the GEMMs and attention kernels (without the elementwise ops).
int64_t matrixFlops(const std::vector<OpShape>& ops) {
    int64_t f = 0;
    for (const OpShape& o : ops)
        if (o.kind != OpShapeKind::Elementwise) f += opFlops(o);
    return f;
}

int64_t allFlops(const std::vector<OpShape>& ops) {
    int64_t f = 0;
    for (const OpShape& o : ops) f += opFlops(o);
    return f;
}

}  // namespace

// Llama-3.1-8B (hidden 4096, 32 heads of 128, 8 KV heads, MLP 14336), 8192 tokens: a block's
// forward is q, k, v, o, gate, up, down and one flash attention over the full sequence.
// GEMM FLOPs: 2 * 8192 * (4096*4096 + 2*4096*1024 + 4096*4096 + 3*4096*14336) = 3,573,412,790,272;
// causal flash attention executes half of 4 * 32 * 8192^2 * 128: 549,755,813,888. Backward:
// dgrad + wgrad per linear (twice the forward GEMMs) and the flash backward at 2.5 times its
// forward (flash-attention benchmarks/benchmark_flash_attention.py flops()).
TEST(OpShapeTest, Llama8BBlockForwardAndBackward) {
    const Program p = lowered(planFor("llama-3.1-8b", 8));
    const int32_t fwd = findTask(p, TaskKind::Forward, "model.layers.7");
    const std::vector<OpShape> ops = opsOf(p, fwd);
    const std::vector<Gemm> expected{{8192, 4096, 4096, 1},  {8192, 1024, 4096, 1},  {8192, 1024, 4096, 1},
                                     {8192, 4096, 4096, 1},  {8192, 14336, 4096, 1}, {8192, 14336, 4096, 1},
                                     {8192, 4096, 14336, 1}};
    EXPECT_EQ(gemmsOf(ops), expected);
    int attentions = 0;
    for (const OpShape& o : ops) {
        EXPECT_EQ(o.dtype, DType::BF16);
        if (o.kind != OpShapeKind::Attention) continue;
        ++attentions;
        EXPECT_EQ(o.batch, 1);
        EXPECT_EQ(o.heads, 32);
        EXPECT_EQ(o.kv_heads, 8);
        EXPECT_EQ(o.seq, 8192);
        EXPECT_EQ(o.head_dim, 128);
        EXPECT_TRUE(o.causal);
    }
    EXPECT_EQ(attentions, 1);
    const int64_t fwd_gemm = 3'573'412'790'272, fwd_attention = 549'755'813'888;
    EXPECT_EQ(matrixFlops(ops), fwd_gemm + fwd_attention);
    // The elementwise ops (norms, RoPE, SiLU, residuals) make up the rest: under 0.1%.
    const Task& f = p.tasks[static_cast<size_t>(fwd)];
    EXPECT_NEAR(static_cast<double>(matrixFlops(ops)) / static_cast<double>(f.flops), 1.0, 1e-3);
    EXPECT_EQ(allFlops(ops), f.flops);

    const int32_t bwd = findTask(p, TaskKind::Backward, "model.layers.7");
    const std::vector<OpShape> bops = opsOf(p, bwd);
    EXPECT_EQ(matrixFlops(bops), 2 * fwd_gemm + 5 * fwd_attention / 2);
    const Task& b = p.tasks[static_cast<size_t>(bwd)];
    EXPECT_NEAR(static_cast<double>(matrixFlops(bops)) / static_cast<double>(b.flops), 1.0, 1e-3);
    EXPECT_EQ(allFlops(bops), b.flops);
    // down_proj's backward comes first: dgrad [8192 x 14336 x 4096], wgrad [4096 x 14336 x 8192].
    const std::vector<Gemm> bgemms = gemmsOf(bops);
    ASSERT_EQ(bgemms.size(), 14u);
    EXPECT_EQ(bgemms[0], (Gemm{8192, 14336, 4096, 1}));
    EXPECT_EQ(bgemms[1], (Gemm{4096, 14336, 8192, 1}));
}

// Every compute task of the step: the ops' FLOPs add up to the task's, and the root's forward
// includes the LM head [8192 x 128256 x 4096].
TEST(OpShapeTest, Llama8BEveryTaskMatchesItsFlops) {
    const Program p = lowered(planFor("llama-3.1-8b", 8));
    int64_t total = 0;
    for (int32_t id = 0; id < p.size(); ++id) {
        const Task& t = p.tasks[static_cast<size_t>(id)];
        if (!isCompute(t.kind)) {
            EXPECT_EQ(t.ops.count, 0u) << p.taskLabel(id);
            continue;
        }
        ASSERT_GT(t.ops.count, 0u) << p.taskLabel(id);
        EXPECT_EQ(allFlops(opsOf(p, id)), t.flops) << p.taskLabel(id);
        total += allFlops(opsOf(p, id));
    }
    EXPECT_EQ(total, p.hardware_flops_per_step);
    bool head = false;
    for (int32_t id = 0; id < p.size(); ++id) {
        const Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind != TaskKind::Forward || t.unit != 0) continue;
        for (const Gemm& g : gemmsOf(opsOf(p, id))) head = head || g == Gemm{8192, 128256, 4096, 1};
    }
    EXPECT_TRUE(head);
    // Copies and the optimizer step are one bandwidth-bound op of the task's HBM bytes.
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::CopyIn && t.kind != TaskKind::CopyOut && t.kind != TaskKind::OptimizerStep) continue;
        ASSERT_EQ(t.ops.count, 1u);
        EXPECT_EQ(p.ops[t.ops.offset].kind, OpShapeKind::Elementwise);
        EXPECT_EQ(p.ops[t.ops.offset].bytes, t.hbm_bytes);
    }
}

// PyTorch's foreach AdamW passes over the fp32 shard eight times (torch/optim/adamw.py,
// _multi_tensor_adamw): 20 element reads and writes of 4 bytes per parameter of the unpadded shard.
TEST(OpShapeTest, AdamWStepMovesTheForeachImplementationsBytes) {
    const Program p = lowered(planFor("llama-3.1-8b", 8));
    int64_t shard_elems = 0;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::OptimizerStep) continue;
        EXPECT_EQ(t.hbm_bytes % 80, 0);
        shard_elems = t.hbm_bytes / 80;
    }
    // Llama-3.1-8B's 8,030,261,248 parameters over 8 ranks, each tensor's rows split evenly (every
    // first dimension of the model is a multiple of 8): 1,003,782,656 per rank.
    EXPECT_EQ(shard_elems, int64_t{8030261248} / 8);
}

// Identical blocks and a block's recompute share one span of the ops pool: the pool holds the
// distinct segments' kernels, not every task's.
TEST(OpShapeTest, RepeatedBlocksShareTheirOps) {
    Plan plan = planFor("llama-3.1-8b", 8);
    plan.training.ac = Checkpointing::Full;
    const Program p = lowered(plan);
    const Task& fwd3 = p.tasks[static_cast<size_t>(findTask(p, TaskKind::Forward, "model.layers.3"))];
    const Task& fwd4 = p.tasks[static_cast<size_t>(findTask(p, TaskKind::Forward, "model.layers.4"))];
    const Task& rec4 = p.tasks[static_cast<size_t>(findTask(p, TaskKind::Recompute, "model.layers.4"))];
    EXPECT_EQ(fwd3.ops, fwd4.ops);
    EXPECT_EQ(rec4.ops, fwd4.ops);
    // A block's forward and backward are about 120 kernels (eager elementwise ops launch several:
    // RMSNorm 8 forward and 15 backward); 32 unshared blocks would need thousands.
    EXPECT_LT(p.ops.size(), 400u);
}

// A frozen linear layer needs no weight gradient: its backward keeps only dgrad.
TEST(OpShapeTest, FrozenWeightsSkipWgrad) {
    Plan plan = planFor("llama-3.1-8b", 8);
    plan.training.frozen_regex = "layers\\.7\\.self_attn\\.";
    const Program p = lowered(plan);
    const int32_t bwd = findTask(p, TaskKind::Backward, "model.layers.7");
    EXPECT_EQ(gemmsOf(opsOf(p, bwd)).size(), 14u - 4u);  // q, k, v, o lose their wgrad
    EXPECT_EQ(allFlops(opsOf(p, bwd)), p.tasks[static_cast<size_t>(bwd)].flops);
}

// Eager attention under selective checkpointing: the backward first recomputes the dropped
// scores and values products (batch x heads GEMMs), then runs their backward, two GEMMs each.
// GPT-2 (12 heads of 64), 1024 tokens.
TEST(OpShapeTest, EagerAttentionRecomputedUnderSelectiveCheckpointing) {
    Plan plan = planFor("gpt2", 8);
    plan.training.seq_len = 1024;
    plan.training.attention = AttentionKernel::Eager;
    plan.training.ac = Checkpointing::AttnCore;
    const Program p = lowered(plan);
    const int32_t fwd = findTask(p, TaskKind::Forward, "transformer.h.2");
    const std::vector<Gemm> fwd_gemms = gemmsOf(opsOf(p, fwd));
    // c_attn, QK^T, PV, c_proj, c_fc, c_proj.
    const std::vector<Gemm> expected{{1024, 2304, 768, 1}, {1024, 1024, 64, 12}, {1024, 64, 1024, 12},
                                     {1024, 768, 768, 1},  {1024, 3072, 768, 1}, {1024, 768, 3072, 1}};
    EXPECT_EQ(fwd_gemms, expected);
    const int32_t bwd = findTask(p, TaskKind::Backward, "transformer.h.2");
    const std::vector<Gemm> bwd_gemms = gemmsOf(opsOf(p, bwd));
    // 4 linears x 2 + recomputed QK^T and PV + 2 x 2 for their backward.
    EXPECT_EQ(bwd_gemms.size(), 14u);
    EXPECT_EQ(allFlops(opsOf(p, bwd)), p.tasks[static_cast<size_t>(bwd)].flops);
}

// A module tree has no shapes: a matmul whose module owns a [rows, cols] weight with
// 2 * rows * cols FLOPs per token becomes that GEMM; other ops stay bandwidth-bound with their
// FLOPs. examples/tiny-mlp-tree.json: fc1 [1024, 256], fc2 [256, 1024], head [1000, 256].
TEST(OpShapeTest, ModuleTreeMatmulsBecomeGemms) {
    auto model = loadModelFile(std::string(SHARDCAST_SOURCE_DIR) + "/examples/tiny-mlp-tree.json");
    ASSERT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
    Plan plan = planFor("gpt2", 8);
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.training.seq_len = 512;
    const Program p = lowered(plan);
    const int32_t fwd = findTask(p, TaskKind::Forward, "layers.0");
    EXPECT_EQ(gemmsOf(opsOf(p, fwd)), (std::vector<Gemm>{{512, 1024, 256, 1}, {512, 256, 1024, 1}}));
    EXPECT_EQ(allFlops(opsOf(p, fwd)), p.tasks[static_cast<size_t>(fwd)].flops);
    for (int32_t id = 0; id < p.size(); ++id) {
        const Task& t = p.tasks[static_cast<size_t>(id)];
        if (isCompute(t.kind)) {
            EXPECT_EQ(allFlops(opsOf(p, id)), t.flops) << p.taskLabel(id);
        }
    }
}
