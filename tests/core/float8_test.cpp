// fp8 all-gather (issue 26, item 4): torchao float8 training with FSDP2's float8 all-gather and
// precomputed scales (rule F8), against figures worked out by hand for Llama-3.1-8B on 8 ranks.
#include <gtest/gtest.h>

#include <string>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "core/program/program.hpp"

using namespace shardcast::core;

namespace {

constexpr int64_t kH = 4096, kI = 14336, kT = 8192;

Result<Plan> planWith(const char* all_gather, const char* gpu = "H100-SXM", int64_t fsdp = 2) {
    PlanOverrides o;
    o.model = "llama-3.1-8b";
    o.gpu = gpu;
    o.seq_len = kT;
    o.fsdp = fsdp;
    o.all_gather_dtype = all_gather;
    auto plan = buildPlan(o);
    if (!plan) return plan.error();
    auto mesh = validatePlan(*plan);
    if (!mesh) return mesh.error();
    return plan;
}

Program lowered(const Plan& plan) {
    auto mesh = validatePlan(plan);
    EXPECT_TRUE(mesh.ok());
    Program p;
    EXPECT_TRUE(lower(plan, *mesh, p).ok());
    return p;
}

const UnitInfo& unitNamed(const Program& p, const std::string& name) {
    for (const UnitInfo& u : p.units) {
        if (u.name == name) return u;
    }
    ADD_FAILURE() << "no unit " << name;
    return p.units.front();
}

int32_t unitIndex(const Program& p, const std::string& name) {
    for (size_t u = 0; u < p.units.size(); ++u) {
        if (p.units[u].name == name) return static_cast<int32_t>(u);
    }
    return -1;
}

// Elementwise bytes and GEMMs (by dtype) of one unit's task of a kind.
struct TaskOps {
    int64_t elementwise_bytes = 0;
    int f8_gemms = 0, bf16_gemms = 0;
};
TaskOps opsOf(const Program& p, int32_t unit, TaskKind kind) {
    TaskOps out;
    for (const Task& t : p.tasks) {
        if (t.unit != unit || t.kind != kind || t.micro_batch != 0) continue;
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const OpShape& op = p.ops[t.ops.offset + i];
            if (op.kind == OpShapeKind::Elementwise) out.elementwise_bytes += op.bytes;
            if (op.kind == OpShapeKind::Gemm && op.batch == 1) (op.dtype == DType::F8 ? out.f8_gemms : out.bf16_gemms)++;
        }
    }
    return out;
}

}  // namespace

// Per block, the Float8Linear weights (q, k, v, o, gate, up, down: 4096 x 53,248 elements) are
// gathered and held in one byte each; the two norms (2 x 4096) stay bf16. The root's embedding,
// norm and output layer (torchtitan leaves "output" in bf16) do not change.
TEST(Float8Test, Fp8WeightsAreGatheredAndHeldInOneByte) {
    auto fp8 = planWith("fp8");
    auto bf16 = planWith("param");
    ASSERT_TRUE(fp8.ok() && bf16.ok());
    const Program p = lowered(*fp8), q = lowered(*bf16);
    const int64_t linear = kH * (kH + 1024 + 1024 + kH + 3 * kI);
    EXPECT_EQ(linear, 218'103'808);
    const UnitInfo& l1 = unitNamed(p, "model.layers.1");
    EXPECT_EQ(l1.all_gather.bytes, linear * 1 + 2 * kH * 2);
    EXPECT_EQ(unitNamed(q, "model.layers.1").all_gather.bytes, linear * 2 + 2 * kH * 2);
    EXPECT_EQ(l1.unsharded_bytes, linear + 2 * kH * 2);
    EXPECT_EQ(l1.sharded_bytes, unitNamed(q, "model.layers.1").sharded_bytes);  // fp32 shards kept
    EXPECT_EQ(unitNamed(p, "(root)").all_gather.bytes, unitNamed(q, "(root)").all_gather.bytes);
}

// The block's 7 forward GEMMs run in fp8 and each casts its input (5 bytes per element in two
// kernels: amax, then cast): q, k, v, gate and up read [T, h], o [T, h], down [T, I]. Backward:
// the output gradient's cast, the input's re-cast for wgrad and the weight's transpose for dgrad.
// The LM head stays bf16.
TEST(Float8Test, Float8LinearsRunFp8GemmsAndTheirCasts) {
    auto fp8 = planWith("fp8");
    auto bf16 = planWith("param");
    ASSERT_TRUE(fp8.ok() && bf16.ok());
    const Program p = lowered(*fp8), q = lowered(*bf16);
    const int32_t u = unitIndex(p, "model.layers.1");
    const TaskOps f = opsOf(p, u, TaskKind::Forward), g = opsOf(q, u, TaskKind::Forward);
    EXPECT_EQ(f.f8_gemms, 7);
    EXPECT_EQ(f.bf16_gemms, 0);
    EXPECT_EQ(f.elementwise_bytes - g.elementwise_bytes, 5 * kT * (6 * kH + kI));
    const TaskOps fb = opsOf(p, u, TaskKind::Backward), gb = opsOf(q, u, TaskKind::Backward);
    EXPECT_EQ(fb.f8_gemms, 14);
    const int64_t outs = kH + 1024 + 1024 + kH + kI + kI + kH;  // each linear's out features
    const int64_t ins = 6 * kH + kI;
    EXPECT_EQ(fb.elementwise_bytes - gb.elementwise_bytes,
              5 * kT * outs + 5 * kT * ins + 2 * kH * (kH + 1024 + 1024 + kH + 3 * kI));
    const TaskOps root = opsOf(p, unitIndex(p, "(root)"), TaskKind::Forward);
    EXPECT_EQ(root.f8_gemms, 0);
    EXPECT_EQ(root.bf16_gemms, 1);
}

// precompute_float8_dynamic_scale_for_fsdp after the optimizer step: one fp32 read of every
// Float8Linear weight's shard (32 blocks x 218,103,808 / 8 ranks).
TEST(Float8Test, TheAmaxPassReadsEveryFp8ShardAfterTheOptimizerStep) {
    auto fp8 = planWith("fp8");
    auto bf16 = planWith("param");
    ASSERT_TRUE(fp8.ok() && bf16.ok());
    auto optBytes = [](const Program& p) {
        for (const Task& t : p.tasks) {
            if (t.kind == TaskKind::OptimizerStep) return t.hbm_bytes;
        }
        return int64_t{-1};
    };
    EXPECT_EQ(optBytes(lowered(*fp8)) - optBytes(lowered(*bf16)), int64_t{4} * 32 * 218'103'808 / 8);
}

TEST(Float8Test, PlansFp8CannotRunAreRefusedNamingTheField) {
    auto a100 = planWith("fp8", "A100-80G");
    ASSERT_FALSE(a100.ok());
    EXPECT_NE(a100.error().message.find("training.all_gather_dtype fp8"), std::string::npos);
    EXPECT_NE(a100.error().message.find("A100-80G has none"), std::string::npos) << a100.error().message;
    auto fsdp1 = planWith("fp8", "H100-SXM", 1);
    ASSERT_FALSE(fsdp1.ok());
    EXPECT_NE(fsdp1.error().message.find("needs FSDP2"), std::string::npos);
    auto bad = planWith("fp4");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("--all-gather-dtype: unknown dtype 'fp4'; valid: param"), std::string::npos);
}
