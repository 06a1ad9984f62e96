// The implementation switches of the lowering: torchtitan's Llama against HuggingFace's modules
// (what a block saves for backward), and torch.compile against eager (how many kernels a block
// launches and the bytes they move). Expected values worked out by hand from the modeling code.
#include <memory>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "tests/core/lowered_program.hpp"

namespace shardcast::core {
namespace {

Plan llamaPlan(ModelImpl impl, KernelImpl kernels) {
    auto m = resolveModel("llama-3.1-8b");
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*m));
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = 8;
    plan.training.micro_batch = 1;
    plan.training.seq_len = 2048;
    plan.training.impl = impl;
    plan.training.kernels = kernels;
    plan.sharding.strategy = Strategy::FullShard;
    plan.sharding.wrap.kind = WrapKind::Block;
    return plan;
}

const UnitInfo& unitNamed(const Program& p, const std::string& name) {
    for (const UnitInfo& u : p.units) {
        if (u.name == name) return u;
    }
    ADD_FAILURE() << "no unit " << name;
    return p.units.front();
}

// The ops of the first Forward task of unit `name`.
std::vector<OpShape> forwardOps(const Program& p, const std::string& name) {
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::Forward || t.unit < 0 || p.units[static_cast<size_t>(t.unit)].name != name) continue;
        return {p.opsBegin(t), p.opsBegin(t) + t.ops.count};
    }
    ADD_FAILURE() << "no forward task of " << name;
    return {};
}

int countKind(const std::vector<OpShape>& ops, OpShapeKind kind) {
    int n = 0;
    for (const OpShape& o : ops) n += o.kind == kind;
    return n;
}

TEST(ImplKernelsTest, TorchtitanBlockSavesLessThanHuggingFace) {
    // Llama-3.1-8B (h 4096, 32 heads, 8 KV heads of 128), 2,048 tokens, bf16, no AC, flash SDPA.
    // HF eager RMSNorm keeps its fp32 input copy (4h bytes), the rsqrt (4) and the bf16 normalised
    // tensor (2h); torchtitan's nn.RMSNorm (fused) keeps its bf16 input (2h) and rstd (4): 4h bytes
    // less per norm, two norms: 8h = 32,768 B per token. torchtitan repeats K and V to 32 heads
    // before SDPA, which saves them: 2 * (4096 - 1024) * 2 = 12,288 B per token more than HF's
    // native GQA (transformers 5.x). Net 20,480 B per token x 2,048 tokens = 41,943,040 B per block.
    const Program hf = testing::lowered(llamaPlan(ModelImpl::Hf, KernelImpl::Eager));
    const Program tt = testing::lowered(llamaPlan(ModelImpl::Torchtitan, KernelImpl::Eager));
    const int64_t hf_block = unitNamed(hf, "model.layers.5").activation_bytes;
    const int64_t tt_block = unitNamed(tt, "model.layers.5").activation_bytes;
    EXPECT_EQ(hf_block - tt_block, 41943040);
    EXPECT_GT(hf_block, tt_block);
}

TEST(ImplKernelsTest, TorchtitanNeedsALlamaModel) {
    Plan plan = llamaPlan(ModelImpl::Torchtitan, KernelImpl::Eager);
    auto m = resolveModel("gpt2");
    ASSERT_TRUE(m.ok());
    plan.model = std::make_shared<const Model>(std::move(*m));
    auto mesh = validatePlan(plan);
    ASSERT_FALSE(mesh.ok());
    EXPECT_NE(mesh.error().message.find("training.impl torchtitan"), std::string::npos) << mesh.error().message;
    EXPECT_NE(mesh.error().message.find("gpt2"), std::string::npos) << mesh.error().message;
}

TEST(ImplKernelsTest, CompileLaunchesOneKernelPerElementwiseChain) {
    // HF Llama block forward, eager: input RMSNorm (8 kernels: casts, pow, mean, add, rsqrt, muls),
    // q/k/v GEMMs, RoPE on q and k (10), SDPA, o_proj, residual add (1), post-attention RMSNorm (8),
    // gate and up GEMMs, SiLU (1), mul (1), down_proj, residual add (1): 30 elementwise kernels,
    // 7 GEMMs, 1 attention kernel.
    const auto eager = forwardOps(testing::lowered(llamaPlan(ModelImpl::Hf, KernelImpl::Eager)), "model.layers.5");
    EXPECT_EQ(countKind(eager, OpShapeKind::Elementwise), 30);
    EXPECT_EQ(countKind(eager, OpShapeKind::Gemm), 7);
    EXPECT_EQ(countKind(eager, OpShapeKind::Attention), 1);
    // torch.compile fuses each chain between two matmuls: the norm before q; RoPE before SDPA; the
    // residual add and the next norm between o_proj and gate; SiLU and mul before down_proj; the
    // last residual add: 5 kernels, the GEMMs and SDPA unchanged.
    const auto compiled = forwardOps(testing::lowered(llamaPlan(ModelImpl::Hf, KernelImpl::Compile)), "model.layers.5");
    EXPECT_EQ(countKind(compiled, OpShapeKind::Elementwise), 5);
    EXPECT_EQ(countKind(compiled, OpShapeKind::Gemm), 7);
    EXPECT_EQ(countKind(compiled, OpShapeKind::Attention), 1);
    // And fewer bytes: the fused RMSNorm reads and writes each element once (2h units instead of
    // the eager 18h, twice per block): 2 * 16 * 4096 * 2 B = 262,144 B per token less, and the
    // fused gated activation moves 3I instead of 2I + 3I: 2 * 14336 * 2 B = 57,344 B per token less,
    // and RoPE 2 instead of 10 units per rotated element: 8 * (4096 + 1024) * 2 B = 81,920 B.
    int64_t eager_bytes = 0, compiled_bytes = 0;
    for (const OpShape& o : eager) eager_bytes += o.bytes;
    for (const OpShape& o : compiled) compiled_bytes += o.bytes;
    EXPECT_EQ(eager_bytes - compiled_bytes, (262144 + 57344 + 81920) * int64_t{2048});
}

}  // namespace
}  // namespace shardcast::core
