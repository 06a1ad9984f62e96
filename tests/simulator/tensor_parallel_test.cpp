// FSDP composed with tensor parallelism (core/lower/lower_tp.cpp, rules TP1-TP5): the TP-local
// parameter shards fully_shard shards again, the collectives DTensor issues on the tp group,
// the memory PyTorch's FSDPMemTracker measured for FSDP2 + TP, the mesh checks and the Program's
// file form. Figures are worked out by hand from Llama-3.1-8B's config (hidden 4096, 32 heads,
// 8 KV heads of 128, MLP 14336, vocabulary 128256) or measured with scripts/torch_peer.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/lower/lower.hpp"
#include "core/lower/lower_internal.hpp"
#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/program/program_check.hpp"
#include "core/program/program_io.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/pytorch_code.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

using core::OpShapeKind;

constexpr int64_t kHidden = 4096, kVocab = 128256;
constexpr int64_t kMiB = int64_t{1} << 20;

std::shared_ptr<const core::Model> llama8b(int layers) { return testing::scaledModel("llama-3.1-8b", layers); }

core::Plan tpPlan(int layers, int tp, int nodes = 1, int64_t seq = 2048) {
    core::Plan plan;
    plan.model = llama8b(layers);
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.micro_batch = 1;
    plan.training.seq_len = seq;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    plan.sharding.tp = tp;
    plan.sharding.loss_parallel = false;
    return plan;
}

core::Program lowered(const core::Plan& plan) { return testing::loweredProgram(plan); }

// TP collectives of micro-batch 0 by kind and by task kind, with their sizes.
struct TpCounts {
    std::array<int, 3> forward{}, backward{}, recompute{};  // all-gather, reduce-scatter, all-reduce
    int64_t bytes_min = INT64_MAX, bytes_max = 0;
};

TpCounts countTp(const core::Program& p) {
    TpCounts c;
    for (const core::Task& t : p.tasks) {
        if (t.micro_batch != 0) continue;
        const core::OpShape* ops = p.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            if (!core::isTpCollective(ops[i].kind)) continue;
            const auto k = static_cast<size_t>(ops[i].kind) - static_cast<size_t>(OpShapeKind::TpAllGather);
            auto& row = t.kind == core::TaskKind::Backward    ? c.backward
                         : t.kind == core::TaskKind::Recompute ? c.recompute
                                                               : c.forward;
            ++row[k];
            c.bytes_min = std::min(c.bytes_min, ops[i].bytes);
            c.bytes_max = std::max(c.bytes_max, ops[i].bytes);
            EXPECT_EQ(ops[i].group_size, p.groups[static_cast<size_t>(ops[i].group)].size);
            EXPECT_EQ(p.groups[static_cast<size_t>(ops[i].group)].kind, core::GroupKind::Tensor);
        }
    }
    return c;
}

// TP1: a block of Llama-3.1-8B keeps, per tp rank of 2: q [2048, 4096], k and v [512, 4096],
// o [4096, 2048], gate and up [7168, 4096], down [4096, 7168], two norms [4096] replicated:
// 8,388,608 * 2 + 2,097,152 * 2 + 29,360,128 * 3 + 8,192 = 109,060,096 elements. fully_shard
// over the 4 dp ranks divides every dim 0 evenly: 27,265,024 fp32 elements = 109,060,096 bytes.
// The root: embedding and LM head [64128, 4096] each and the final norm: 525,340,672 elements,
// 131,335,168 per dp rank in fp32 = 525,340,672 bytes.
TEST(TensorParallelTest, FullyShardShardsTheTpLocalShards) {
    const core::Program p = lowered(tpPlan(2, 2));
    ASSERT_EQ(p.units.size(), 3u);
    EXPECT_EQ(p.tp_size, 2);
    EXPECT_EQ(p.units[1].params, 109'060'096);
    EXPECT_EQ(p.units[1].sharded_bytes, 109'060'096);
    // Unsharded in bf16: the TP-local block, 4 dp shards gathered.
    EXPECT_EQ(p.units[1].unsharded_bytes, 109'060'096 * 2);
    EXPECT_EQ(p.units[0].params, 525'340'672);
    EXPECT_EQ(p.units[0].sharded_bytes, 525'340'672);
    // The dp group strides over the tp ranks: ranks {t, t + 2, t + 4, t + 6}.
    for (const core::ProcessGroup& g : p.groups) {
        if (g.kind == core::GroupKind::Shard) {
            EXPECT_EQ(g.size, 4);
            EXPECT_EQ(g.stride, 2);
        }
        if (g.kind == core::GroupKind::Tensor) {
            EXPECT_EQ(g.size, 2);
            EXPECT_EQ(g.stride, 1);
            EXPECT_EQ(g.nodes, 1);
        }
    }
}

// TP3 under sequence parallelism, no AC, 2 blocks: forward 2 all-gathers (before q/k/v, before
// gate/up) and 2 reduce-scatters (after o_proj, down_proj) per block, the embedding's
// reduce-scatter and the LM head's all-gather; backward the mirror. Every one moves the hidden
// states of the micro-batch: 2048 tokens x 4096 x 2 bytes = 16,777,216 bytes.
TEST(TensorParallelTest, SequenceParallelCollectivesPerMicroBatch) {
    core::Plan plan = tpPlan(2, 2);
    plan.sharding.loss_parallel = true;  // torchtitan's default: the logits stay vocab-sharded
    const TpCounts c = countTp(lowered(plan));
    EXPECT_EQ(c.forward[0], 2 * 2 + 1);
    EXPECT_EQ(c.forward[1], 2 * 2 + 1);
    EXPECT_EQ(c.forward[2], 0);
    EXPECT_EQ(c.backward[0], 2 * 2 + 1);
    EXPECT_EQ(c.backward[1], 2 * 2 + 1);
    EXPECT_EQ(c.backward[2], 0);
    EXPECT_EQ(c.bytes_min, 2048 * kHidden * 2);
    EXPECT_EQ(c.bytes_max, 2048 * kHidden * 2);
}

// Without sequence parallelism: all-reduces after o_proj, down_proj and the embedding in forward;
// in backward after the first colwise linear of each run (q, gate, lm_head). With loss_parallel
// off the logits are all-gathered before the loss: 2048 x 128256 x 2 bytes.
TEST(TensorParallelTest, WithoutSequenceParallelAllReduces) {
    core::Plan plan = tpPlan(2, 2);
    plan.sharding.sequence_parallel = false;
    const TpCounts c = countTp(lowered(plan));
    EXPECT_EQ(c.forward[0], 1);  // the logits
    EXPECT_EQ(c.forward[1], 0);
    EXPECT_EQ(c.forward[2], 2 * 2 + 1);
    EXPECT_EQ(c.backward[0], 0);
    EXPECT_EQ(c.backward[1], 0);
    EXPECT_EQ(c.backward[2], 2 * 2 + 1);
    EXPECT_EQ(c.bytes_max, 2048 * kVocab * 2);
}

// Full AC: the recompute repeats each block's forward collectives (2 all-gathers, 2
// reduce-scatters per block).
TEST(TensorParallelTest, RecomputeRepeatsTheForwardCollectives) {
    core::Plan plan = tpPlan(2, 2);
    plan.training.ac = core::Checkpointing::Full;
    const TpCounts c = countTp(lowered(plan));
    EXPECT_EQ(c.recompute[0], 2 * 2);
    EXPECT_EQ(c.recompute[1], 2 * 2);
}

// TP2: per tp rank, each linear does 1/tp of the GEMM: q_proj over 2048 tokens is
// [2048, 4096] x [4096, 4096 / 4] at tp 4; o_proj [2048, 1024] x [1024, 4096]; the flash
// attention kernel runs 32 / 4 heads and 8 / 4 KV heads.
// The gated MLP's product backward (Llama-3.1-8B: I = 14,336, h = 4,096) holds three [tokens, I]
// tensors, split by heads, and the block's output gradient [tokens, h], the residual stream's:
// sequence-sharded under SP, whole without. Per token at tp 2: (3 x 14,336 + 4,096) / 2 = 23,552
// with SP; 3 x 14,336 / 2 + 4,096 = 25,600 without.
TEST(TensorParallelTest, ProductBackwardKeepsTheResidualGradientWholeWithoutSp) {
    const auto model = llama8b(1);
    const core::Op* mul = nullptr;
    for (const core::Op& op : model->ops) {
        if (op.name == "mul") mul = &op;
    }
    ASSERT_NE(mul, nullptr);
    EXPECT_EQ(mul->bwd_temp_act.per_token, 3 * 14336 + 4096);
    EXPECT_EQ(core::detail::tpLocalOp(*mul, 2, true, true).bwd_temp_act.per_token, 23552);
    EXPECT_EQ(core::detail::tpLocalOp(*mul, 2, false, true).bwd_temp_act.per_token, 25600);
    EXPECT_EQ(core::detail::tpLocalOp(*mul, 4, false, true).bwd_temp_act.per_token, 3 * 14336 / 4 + 4096);
}

TEST(TensorParallelTest, KernelsRunTheLocalShapes) {
    const core::Program p = lowered(tpPlan(1, 4));
    bool q = false, o = false, attn = false;
    for (const core::Task& t : p.tasks) {
        if (t.kind != core::TaskKind::Forward || t.micro_batch != 0) continue;
        const core::OpShape* ops = p.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const core::OpShape& op = ops[i];
            if (op.kind == OpShapeKind::Gemm && op.m == 2048 && op.n == 1024 && op.k == 4096) q = true;
            if (op.kind == OpShapeKind::Gemm && op.m == 2048 && op.n == 4096 && op.k == 1024) o = true;
            if (op.kind == OpShapeKind::Attention) {
                EXPECT_EQ(op.heads, 8);
                EXPECT_EQ(op.kv_heads, 2);
                attn = true;
            }
        }
    }
    EXPECT_TRUE(q);
    EXPECT_TRUE(o);
    EXPECT_TRUE(attn);
}

// Memory against PyTorch: FSDP2 + TP (torchtitan's Llama plan, SP on, loss_parallel off) under
// FakeTensorMode with FSDPMemTracker, Llama-3.1-8B with 4 blocks, seq 2048, micro-batch 1, sdpa,
// transformers 5.x mask, AdamW, bf16 / fp32 reduce, step 1:
//   scripts/torch_peer.py models/llama-3.1-8b.json --world W --seq 2048 --reshard true --attn sdpa
//       --hf-unpacked-mask skip --layers 4 --ac AC --tp T
// Bytes at the tracker's global peak (both peaks fall in the root's backward).
// Each category at the peak within 1% or 16 MiB of what FSDPMemTracker measured.
void expectAtPeakNear(const core::CategoryBytes& at, std::initializer_list<std::pair<core::MemCategory, int64_t>> measured) {
    for (const auto& [category, bytes] : measured) {
        const int64_t predicted = at[core::index(category)];
        EXPECT_LE(std::llabs(predicted - bytes), std::max<int64_t>(bytes / 100, 16 * kMiB))
            << core::categoryName(category) << ": predicted " << predicted << " B, measured " << bytes << " B";
    }
}

struct PeerRow {
    int world, tp;
    core::Checkpointing ac;
    int64_t sharded_param, unsharded_param, activation, temp, all_gather, opt_state;
};

class PeerMemory : public ::testing::TestWithParam<PeerRow> {};

TEST_P(PeerMemory, EveryCategoryAtThePeakWithinOnePercentOr16MiB) {
    const PeerRow& r = GetParam();
    core::Plan plan = tpPlan(4, r.tp, r.world / 8);
    plan.training.ac = r.ac;
    plan.training.hf_mask = core::HfMask::V5;
    auto e = evaluatePlan(plan, nullptr);
    ASSERT_TRUE(e.ok()) << e.error().message;
    using core::MemCategory;
    expectAtPeakNear(e->memory.at_peak, {{MemCategory::ShardedParam, r.sharded_param},
                                         {MemCategory::UnshardedParam, r.unsharded_param},
                                         {MemCategory::Activation, r.activation},
                                         {MemCategory::Temp, r.temp},
                                         {MemCategory::AllGather, r.all_gather},
                                         {MemCategory::OptState, r.opt_state}});
}

INSTANTIATE_TEST_SUITE_P(
    TorchPeer, PeerMemory,
    ::testing::Values(
        PeerRow{8, 2, core::Checkpointing::None, 961'581'056, 1'050'681'344, 1'983'418'376, 2'101'346'304, 218'120'192, 1'923'162'268},
        PeerRow{8, 4, core::Checkpointing::None, 961'617'920, 525'344'768, 1'593'067'528, 2'101'346'304, 109'068'288, 1'923'235'996},
        PeerRow{16, 2, core::Checkpointing::Full, 480'790'528, 1'050'681'344, 1'127'239'688, 2'101'346'304, 218'120'192, 961'581'212},
        PeerRow{16, 4, core::Checkpointing::Full, 480'808'960, 525'344'768, 1'097'877'512, 2'101'346'304, 109'068'288, 961'618'076}));

// A rank trains on tokens / tp of its micro-batches, and does 1 / tp of their model FLOPs.
// Rule TP5, by hand: the vocab-parallel embedding's weight gradient is the whole vocabulary's,
// vocab x hidden x bf16 = 128,256 x 4,096 x 2 = 1,050,673,152 B, at any tp; the root's
// post-backward copies out the local rows, 525,336,576 B at tp 2 (Temp, a CAST on the compute
// stream before the root's reduce-scatter), and frees the whole gradient. Held across
// micro-batches (no_sync) the whole gradient is upcast with the rest: the root's fp32
// accumulation buffer holds the embedding's 128,256 x 4,096 x 4 = 2,101,346,304 B, the LM head's
// local 64,128 x 4,096 x 4 = 1,050,673,152 B and the norm's 4,096 x 4 = 16,384 B.
TEST(TensorParallelTest, EmbeddingGradientIsTheWholeVocabulary) {
    const int64_t whole = kVocab * kHidden * 2, local = whole / 2;
    const core::Program p = lowered(tpPlan(2, 2));
    int32_t copy = -1, last_backward = -1, root_rs = -1;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind == core::TaskKind::Backward) last_backward = id;
        if (t.kind == core::TaskKind::Cast && t.unit == 0 && t.stream == core::Stream::Compute) copy = id;
        if (t.kind == core::TaskKind::ReduceScatter && t.unit == 0) root_rs = id;
    }
    ASSERT_GE(copy, 0) << "no copy of the local rows";
    EXPECT_GT(copy, last_backward);
    EXPECT_LT(copy, root_rs);
    const core::Task& c = p.tasks[static_cast<size_t>(copy)];
    ASSERT_EQ(c.mem_start.count, 1u);
    const core::MemEvent& alloc = p.mem[c.mem_start.offset];
    EXPECT_EQ(alloc.bytes, local);
    EXPECT_EQ(alloc.category, core::MemCategory::Temp);
    bool freed_whole = false;
    for (uint32_t i = 0; i < c.mem_end.count; ++i) freed_whole = freed_whole || p.mem[c.mem_end.offset + i].bytes == -whole;
    EXPECT_TRUE(freed_whole);
    // The reduce-scatter waits for the copy (its copy-in reads it).
    const core::Task& rs = p.tasks[static_cast<size_t>(root_rs)];
    const int32_t* deps = p.depsBegin(rs);
    EXPECT_NE(std::find(deps, deps + rs.deps.count, copy), deps + rs.deps.count);

    core::Plan accumulating = tpPlan(2, 2);
    accumulating.training.grad_accum = 2;
    accumulating.training.no_sync = true;
    const core::Program a = lowered(accumulating);
    bool upcast = false;
    for (const core::Task& t : a.tasks) {
        if (t.kind != core::TaskKind::Cast || t.unit != 0 || t.dtype != core::DType::F32 || t.mem_start.count == 0) continue;
        const core::MemEvent& e = a.mem[t.mem_start.offset];
        if (e.category != core::MemCategory::UnshardedGrad) continue;
        EXPECT_EQ(e.bytes, kVocab * kHidden * 4 + kVocab / 2 * kHidden * 4 + kHidden * 4);
        upcast = true;
    }
    EXPECT_TRUE(upcast);
    // Without tensor parallelism the gradient is the parameter's own: no copy.
    const core::Program one = lowered(tpPlan(2, 1));
    const auto copies = std::count_if(one.tasks.begin(), one.tasks.end(), [](const core::Task& t) {
        return t.kind == core::TaskKind::Cast && t.unit == 0 && t.stream == core::Stream::Compute;
    });
    EXPECT_EQ(copies, 0);
}

TEST(TensorParallelTest, ThroughputCountsTokensPerGpu) {
    auto one = evaluatePlan(tpPlan(2, 1), nullptr);
    auto two = evaluatePlan(tpPlan(2, 2), nullptr);
    ASSERT_TRUE(one.ok() && two.ok());
    EXPECT_DOUBLE_EQ(two->summary.tokens_per_s_per_gpu * two->summary.step_s, 2048.0 / 2);
    EXPECT_DOUBLE_EQ(one->summary.tokens_per_s_per_gpu * one->summary.step_s, 2048.0);
    EXPECT_NEAR(two->program.model_flops_per_step * 2 / one->program.model_flops_per_step, 1.0, 1e-12);
    EXPECT_GT(two->tp_comm_s, 0);
    EXPECT_EQ(one->tp_comm_s, 0);
}

// The Program keeps its TP collectives through its file form, and its check accepts them.
TEST(TensorParallelTest, ProgramRoundTripsThroughJson) {
    const core::Program p = lowered(tpPlan(1, 2));
    ASSERT_TRUE(core::validateProgram(p).ok());
    auto back = core::programFromJson(core::programToJson(p), "test");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, p);
}

// Meshes that cannot be built are refused with the valid choices.
TEST(TensorParallelTest, BadMeshesNameTheValidChoices) {
    auto refused = [](core::Plan plan, const std::string& expected) {
        auto mesh = core::validatePlan(plan);
        ASSERT_FALSE(mesh.ok()) << "accepted; expected: " << expected;
        EXPECT_NE(mesh.error().message.find(expected), std::string::npos) << mesh.error().message;
    };
    refused(tpPlan(2, 3), "valid: 1, 2, 4, 8");  // 3 divides neither 8 GPUs per node nor 8 KV heads
    core::Plan sixteen = tpPlan(2, 16);
    sixteen.cluster.gpus_per_node = 16;
    refused(sixteen, "key-value heads (8)");
    core::Plan pp = tpPlan(2, 4);
    pp.sharding.pp = 4;
    pp.training.grad_accum = 4;
    refused(pp, "tp 4 times sharding.pp 4 must divide the world size 8");
    core::Plan cp = tpPlan(2, 1);
    cp.sharding.cp = 2;
    refused(cp, "context parallelism is not modelled");
    core::Plan seq = tpPlan(2, 4, 1, 2046);
    refused(seq, "must divide training.seq_len 2046");
    core::Plan ddp = tpPlan(2, 2);
    ddp.sharding.strategy = core::Strategy::NoShard;
    refused(ddp, "needs a sharded strategy");
    auto phi3 = core::resolveModel("phi-3-mini-4k");  // fused qkv_proj and gate_up_proj: no plan
    ASSERT_TRUE(phi3.ok());
    core::Plan g = tpPlan(2, 2);
    g.model = std::make_shared<const core::Model>(std::move(*phi3));
    refused(g, "has no tensor-parallel plan");
}

// GPT-2 under Megatron-LM's plan (core/model/model_io.cpp, applyGpt2TpPlan), by hand from its
// config (hidden 768, 12 heads, MLP 3072, vocabulary 50257, 1024 positions; Conv1D weights [in, out]).
core::Plan gpt2Plan(int tp, int world, int64_t micro_batch = 1) {
    core::Plan plan = tpPlan(1, tp, world / 8, 1024);
    auto gpt2 = core::resolveModel("gpt2");
    EXPECT_TRUE(gpt2.ok());
    plan.model = std::make_shared<const core::Model>(std::move(*gpt2));
    plan.model_ref = "gpt2";
    plan.training.micro_batch = micro_batch;
    return plan;
}

// TP1 on GPT-2 at tp 2: a block keeps ln_1 and ln_2 whole (4 x 768), c_attn's columns [768, 1152]
// and bias [1152], attn.c_proj's rows [384, 768] and its bias whole [768], c_fc [768, 1536] + [1536],
// mlp.c_proj [1536, 768] + [768]: 3,072 + 885,888 + 295,680 + 1,181,184 + 1,180,416 = 3,546,240.
// The root: rank 0's wte rows, ceil(50257 / 2) = 25,129 x 768 = 19,299,072 (the LM head is the same
// parameter), wpe 512 x 768 = 393,216, ln_f 1,536: 19,693,824. At tp 4: a block 3,072 + 442,944 +
// 148,224 + 590,592 + 590,592 = 1,775,424; the root 12,565 x 768 + 256 x 768 + 1,536 = 9,848,064.
TEST(TensorParallelTest, Gpt2ShardsMegatronsLayout) {
    const core::Program p2 = lowered(gpt2Plan(2, 8));
    ASSERT_EQ(p2.units.size(), 13u);
    EXPECT_EQ(p2.units[1].params, 3'546'240);
    EXPECT_EQ(p2.units[0].params, 19'693'824);
    const core::Program p4 = lowered(gpt2Plan(4, 8));
    ASSERT_EQ(p4.units.size(), 13u);
    EXPECT_EQ(p4.units[1].params, 1'775'424);
    EXPECT_EQ(p4.units[0].params, 9'848'064);
    // tp 8 does not divide the 12 heads: refused with the valid choices.
    core::Plan bad = gpt2Plan(8, 8);
    auto mesh = core::validatePlan(bad);
    ASSERT_FALSE(mesh.ok());
    EXPECT_NE(mesh.error().message.find("must divide the attention heads (12)"), std::string::npos) << mesh.error().message;
}

// TP3 on GPT-2 with SP, micro-batch 2 of 1,024 tokens: per block 2 all-gathers (before c_attn and
// c_fc) and 2 reduce-scatters (after the two c_proj) of 2,048 x 768 x 2 = 3,145,728 B; the root's
// token embedding reduce-scatters as much, the position embedding one sequence's [1, 1024, 768]:
// 1,572,864 B (position ids are shared across the batch); the LM head's input all-gather
// 3,145,728 B and, loss_parallel off, the logits' 2,048 x 50,257 x 2 = 205,852,672 B. Backward
// mirrors them.
TEST(TensorParallelTest, Gpt2CollectivesAndThePositionEmbedding) {
    const core::Program p = lowered(gpt2Plan(2, 8, 2));
    int rs_full = 0, rs_seq = 0, ag_full = 0, ag_seq = 0, ag_logits = 0, other = 0;
    for (const core::Task& t : p.tasks) {
        if (t.micro_batch != 0) continue;
        const core::OpShape* ops = p.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const core::OpShape& o = ops[i];
            if (!core::isTpCollective(o.kind)) continue;
            const bool fwd = t.kind == core::TaskKind::Forward;
            if (o.kind == OpShapeKind::TpReduceScatter && o.bytes == 3'145'728) rs_full += fwd ? 1 : 100;
            else if (o.kind == OpShapeKind::TpReduceScatter && o.bytes == 1'572'864) rs_seq += fwd ? 1 : 100;
            else if (o.kind == OpShapeKind::TpAllGather && o.bytes == 3'145'728) ag_full += fwd ? 1 : 100;
            else if (o.kind == OpShapeKind::TpAllGather && o.bytes == 1'572'864) ag_seq += fwd ? 1 : 100;
            else if (o.kind == OpShapeKind::TpAllGather && o.bytes == int64_t{2048} * 50257 * 2) ag_logits += fwd ? 1 : 100;
            else ++other;
        }
    }
    // Forward (units) and backward (hundreds): backward reduce-scatters the input gradients after
    // c_attn, c_fc and the LM head, and all-gathers the output gradients before the two c_proj and
    // both embeddings.
    EXPECT_EQ(rs_full, 2 * 12 + 1 + 100 * (2 * 12 + 1));
    EXPECT_EQ(rs_seq, 1);
    EXPECT_EQ(ag_full, 2 * 12 + 1 + 100 * (2 * 12 + 1));
    EXPECT_EQ(ag_seq, 100);
    EXPECT_EQ(ag_logits, 1);
    EXPECT_EQ(other, 0);
}

// plan --pytorch for GPT-2 under TP: the Conv1D layers as nn.Linear (c_attn in Megatron-LM's column
// order), both embeddings RowwiseParallel, the tie restored, the block plan on GPT-2's names and
// its attention's split size divided. scripts/check-emitted-tp.py runs such a file on a small GPT-2.
TEST(TensorParallelTest, Gpt2PytorchCodeAppliesMegatronsPlan) {
    core::Plan plan = gpt2Plan(2, 8);
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    const std::string code = pytorchCode(plan, *mesh, unitsOfPlan(plan));
    for (const char* want :
         {"block.attn.c_attn = _as_linear(block.attn.c_attn, qkv=True)", "w.reshape(3, tp, nf // (3 * tp), nx).transpose(0, 1)",
          "\"transformer.wpe\": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)",
          "\"transformer.ln_f\": SequenceParallel()", "model.lm_head.weight = model.transformer.wte.weight",
          "\"attn.c_attn\": ColwiseParallel(), \"attn.c_proj\": RowwiseParallel(output_layouts=Shard(1))",
          "for attr in (\"split_size\", \"num_heads\", \"embed_dim\")", "mesh = world[\"dp_shard\"]",
          "fully_shard(model.transformer.h[0], mesh=mesh"}) {
        EXPECT_NE(code.find(want), std::string::npos) << want << "\n" << code;
    }
    EXPECT_EQ(code.find("model.model.layers"), std::string::npos) << code;
}

// Memory against PyTorch on GPT-2: FSDP2 + TP (the plan above; torch_peer.py runs each Conv1D as
// the equivalent nn.Linear, which Colwise/RowwiseParallel need) under FakeTensorMode with
// FSDPMemTracker, seq 1024, micro-batch 1, sdpa with attention dropout 0, transformers 4.57.6:
//   scripts/torch_peer.py models/gpt2.json --world W --seq 1024 --reshard true --ac AC --attn sdpa
//       --hf-unpacked-mask keep --attn-dropout 0 --tp T
// Bytes at the tracker's peak (the root's backward in both).
TEST(TensorParallelTest, Gpt2MemoryAgainstTheTracker) {
    struct Row {
        int world, tp;
        core::Checkpointing ac;
        int64_t sharded_param, unsharded_param, buffer, activation, temp, all_gather, opt_state;
    };
    for (const Row& r : {Row{8, 2, core::Checkpointing::None, 62'251'008, 39'392'256, 12'582'960, 526'678'024,
                             411'705'344, 7'092'480, 124'502'608},
                         Row{16, 4, core::Checkpointing::Full, 31'155'456, 19'700'736, 12'582'960, 213'791'752,
                             411'705'344, 3'550'848, 62'311'504}}) {
        core::Plan plan = gpt2Plan(r.tp, r.world);
        plan.training.ac = r.ac;
        plan.training.hf_mask = core::HfMask::V4;
        auto e = evaluatePlan(plan, nullptr);
        ASSERT_TRUE(e.ok()) << e.error().message;
        const core::CategoryBytes& at = e->memory.at_peak;
        using core::MemCategory;
        SCOPED_TRACE("world " + std::to_string(r.world) + ", tp " + std::to_string(r.tp));
        expectAtPeakNear(at, {{MemCategory::ShardedParam, r.sharded_param},
                              {MemCategory::UnshardedParam, r.unsharded_param},
                              {MemCategory::Buffer, r.buffer},
                              {MemCategory::Activation, r.activation},
                              {MemCategory::Temp, r.temp},
                              {MemCategory::AllGather, r.all_gather},
                              {MemCategory::OptState, r.opt_state}});
        int64_t total = 0, measured = r.sharded_param + r.unsharded_param + r.buffer + r.activation + r.temp +
                                          r.all_gather + r.opt_state + 16'384;  // + Inputs
        for (size_t c = 0; c < at.size(); ++c) {
            if (c != core::index(MemCategory::RuntimeOverhead)) total += at[c];
        }
        EXPECT_LE(std::llabs(total - measured), measured / 200) << total << " vs " << measured;
    }
}

}  // namespace
}  // namespace shardcast::sim

namespace shardcast::sim {
namespace {

// Async TP (rule TP4): all-gathers before a colwise run and in backward before a rowwise linear
// overlap the GEMMs after them, reduce-scatters the GEMMs before them; needs SP and compile.
TEST(TensorParallelTest, AsyncTpMarksTheFusedCollectives) {
    core::Plan plan = tpPlan(1, 2);
    plan.sharding.async_tp = true;
    plan.training.kernels = core::KernelImpl::Compile;
    const core::Program p = lowered(plan);
    int next = 0, previous = 0, alone = 0;
    for (const core::OpShape& op : p.ops) {
        if (!core::isTpCollective(op.kind)) continue;
        if (op.overlap == 1) {
            EXPECT_EQ(op.kind, OpShapeKind::TpAllGather);
            ++next;
        } else if (op.overlap == 2) {
            EXPECT_EQ(op.kind, OpShapeKind::TpReduceScatter);
            ++previous;
        } else {
            ++alone;
        }
    }
    // Per block forward: 2 all-gathers (next), 2 reduce-scatters (previous); backward: 2 and 2; the
    // LM head's all-gather (next) and its input gradient's reduce-scatter (previous); the embedding's
    // reduce-scatter and its gradient's all-gather follow no GEMM.
    EXPECT_EQ(next, 2 + 2 + 1);
    EXPECT_EQ(previous, 2 + 2 + 1);
    EXPECT_EQ(alone, 2);
    // Torch's symmetric-memory kernels around them, by hand for tp 2 and S bytes: a fused all-gather's
    // local shard copied into the symmetric buffer first (S / 2 read and written: S bytes), a fused
    // reduce-scatter's 2 partial chunks summed after it (S read, S / 2 written, S / 4 bf16 adds).
    for (size_t i = 0; i < p.ops.size(); ++i) {
        const core::OpShape& op = p.ops[i];
        if (op.overlap == 1) {
            ASSERT_GT(i, 0U);
            EXPECT_EQ(p.ops[i - 1].kind, OpShapeKind::Elementwise);
            EXPECT_EQ(p.ops[i - 1].bytes, op.bytes);
            EXPECT_EQ(p.ops[i - 1].flops, 0);
        } else if (op.overlap == 2) {
            ASSERT_LT(i + 1, p.ops.size());
            EXPECT_EQ(p.ops[i + 1].kind, OpShapeKind::Elementwise);
            EXPECT_EQ(p.ops[i + 1].bytes, op.bytes + op.bytes / 2);
            EXPECT_EQ(p.ops[i + 1].flops, op.bytes / 4);
        }
    }
    // Vanilla TP has none of them: 10 elementwise kernels fewer (the reduction is NCCL's).
    core::Plan vanilla = plan;
    vanilla.sharding.async_tp = false;
    auto elementwise = [](const core::Program& q) {
        return std::count_if(q.ops.begin(), q.ops.end(), [](const core::OpShape& o) { return o.kind == OpShapeKind::Elementwise; });
    };
    EXPECT_EQ(elementwise(p) - elementwise(lowered(vanilla)), next + previous);
    core::Plan eager = plan;
    eager.training.kernels = core::KernelImpl::Eager;
    auto mesh = core::validatePlan(eager);
    ASSERT_FALSE(mesh.ok());
    EXPECT_NE(mesh.error().message.find("needs training.kernels compile"), std::string::npos);
}

// The cost of an overlapped pair, worked from its parts: an all-gather of 64 MiB over 2 ranks and
// the [8192 x 4096] x [4096 x 4096] GEMM that reads it run as 2 chunks of 4096 rows; the pair takes
// max(comm, chunked GEMM) + min(comm, chunked GEMM) / 2. Without the overlap the two add up.
TEST(TensorParallelTest, AsyncTpPairCostsTheLongerPlusOneChunk) {
    const core::Plan plan = tpPlan(1, 2);
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    const CostModel cost(profile);
    core::Program p = lowered(plan);
    const int32_t tensor = [&] {
        for (size_t g = 0; g < p.groups.size(); ++g)
            if (p.groups[g].kind == core::GroupKind::Tensor) return static_cast<int32_t>(g);
        return -1;
    }();
    ASSERT_GE(tensor, 0);
    core::Program q;
    q.groups = p.groups;
    q.tokens_per_micro_batch = 8192;
    core::OpShape ag;
    ag.kind = OpShapeKind::TpAllGather;
    ag.bytes = 64 * kMiB;
    ag.group = tensor;
    ag.group_size = 2;
    ag.group_nodes = 1;
    ag.overlap = 1;
    core::OpShape gemm;
    gemm.kind = OpShapeKind::Gemm;
    gemm.m = 8192;
    gemm.n = 4096;
    gemm.k = 4096;
    gemm.batch = 1;
    q.ops = {ag, gemm};
    core::Task t;
    t.kind = core::TaskKind::Forward;
    t.ops = core::Span{0, 2};
    core::OpShape half = gemm;
    half.m = 4096;
    const double comm = cost.opSeconds(ag, t.kind), chunks = 2 * cost.opSeconds(half, t.kind);
    double exposed = -1;
    EXPECT_DOUBLE_EQ(cost.kernelSeconds(t, q, &exposed), std::max(comm, chunks) + std::min(comm, chunks) / 2);
    EXPECT_DOUBLE_EQ(exposed, std::max(comm, chunks) + std::min(comm, chunks) / 2 - chunks);
    q.ops[0].overlap = 0;
    EXPECT_DOUBLE_EQ(cost.kernelSeconds(t, q, &exposed), comm + cost.opSeconds(gemm, t.kind));
    EXPECT_DOUBLE_EQ(exposed, comm);
}

// Rule F8-TP (torchao's float8 TP styles, as torchtitan applies them with tensorwise Float8):
// Llama-8B, one block, tp 2, seq 2048, eager kernels, by hand. A colwise run's input is cast once on
// this rank's sequence shard (5 bytes per element of 1,024 x 4,096, in the cast's 2 kernels of
// 10,485,760 bytes), then all-gathered in fp8: 2,048 x 4,096 x 1 = 8,388,608 bytes, half the bf16
// twin's; its linears then run back to back, no cast between them. In backward a rowwise linear's
// output gradient is cast on its shard, and its fp8 weight transposed (2 bytes per element of its
// local weight), before the fp8 all-gather.
TEST(TensorParallelTest, Float8TpGathersFp8AfterOneCastOfTheShard) {
    core::Plan plan = tpPlan(1, 2);
    plan.training.all_gather_dtype = core::AllGatherDtype::Fp8;
    const core::Program p = lowered(plan);
    int forward = 0, backward = 0;
    for (const core::Task& t : p.tasks) {
        const core::OpShape* ops = p.opsBegin(t);
        for (uint32_t i = 0; i + 1 < t.ops.count; ++i) {
            if (ops[i].kind != OpShapeKind::TpAllGather) continue;
            if (ops[i + 1].kind != OpShapeKind::Gemm || ops[i + 1].dtype != core::DType::F8) continue;
            EXPECT_EQ(ops[i].bytes, 8'388'608);
            ASSERT_GE(i, 2U);
            if (t.kind == core::TaskKind::Backward) {
                ++backward;
                EXPECT_EQ(ops[i - 1].kind, OpShapeKind::Elementwise);
                // The weight transposed: down_proj's 7,168 x 4,096 local rows first, then o_proj's 2,048.
                EXPECT_EQ(ops[i - 1].bytes, backward == 1 ? 2 * 7168 * 4096 : 2 * 2048 * 4096);
                EXPECT_EQ(ops[i - 2].bytes, 10'485'760);        // the gradient's cast, second kernel
                continue;
            }
            ++forward;
            EXPECT_EQ(ops[i - 1].bytes, 10'485'760);
            EXPECT_EQ(ops[i - 2].bytes, 10'485'760);
            // q, k, v (or gate, up) back to back in fp8.
            const uint32_t run = ops[i + 2].kind == OpShapeKind::Gemm && ops[i + 3].kind == OpShapeKind::Gemm ? 3 : 2;
            for (uint32_t j = 1; j <= run; ++j) {
                EXPECT_EQ(ops[i + j].kind, OpShapeKind::Gemm);
                EXPECT_EQ(ops[i + j].dtype, core::DType::F8);
            }
        }
    }
    EXPECT_EQ(forward, 2);   // attention's and the MLP's inputs
    EXPECT_EQ(backward, 2);  // o_proj's and down_proj's output gradients
    // down_proj (rowwise, 7,168 local input columns) casts its input in forward (5 x 2,048 x 7,168
    // bytes in 2 kernels) and keeps it in fp8: its weight gradient reads it transposed (2 bytes per
    // element, 1 kernel), no second cast. Backward's casts of that size are gate's and up's output
    // gradients (7,168 local columns each, 2 kernels each); a second cast of down's input would add 2.
    int fwd_cast = 0, bwd_cast = 0, bwd_transpose = 0;
    for (const core::Task& t : p.tasks) {
        const core::OpShape* ops = p.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            if (ops[i].kind != OpShapeKind::Elementwise) continue;
            if (ops[i].bytes == 5 * 2048 * 7168 / 2) ++(t.kind == core::TaskKind::Backward ? bwd_cast : fwd_cast);
            if (ops[i].bytes == 2 * 2048 * 7168 && t.kind == core::TaskKind::Backward) ++bwd_transpose;
        }
    }
    EXPECT_EQ(fwd_cast, 2);
    EXPECT_EQ(bwd_cast, 4);  // gate's and up's local output gradients (7,168 columns each), not down's input
    EXPECT_EQ(bwd_transpose, 1);
    // Under async TP every fused all-gather is followed by the fp8 GEMMs it feeds, which it then
    // overlaps (a cast between them would leave it nothing to overlap).
    core::Plan async = plan;
    async.sharding.async_tp = true;
    async.training.kernels = core::KernelImpl::Compile;
    const core::Program q = lowered(async);
    int fused = 0;
    for (size_t i = 0; i + 1 < q.ops.size(); ++i) {
        if (q.ops[i].kind != OpShapeKind::TpAllGather || q.ops[i].overlap != 1) continue;
        if (q.ops[i].bytes != 8'388'608) continue;  // the LM head's all-gather is bf16, its GEMM too
        ++fused;
        EXPECT_EQ(q.ops[i + 1].kind, OpShapeKind::Gemm);
        EXPECT_EQ(q.ops[i + 1].dtype, core::DType::F8);
    }
    EXPECT_EQ(fused, 4);
    // The bf16 twin gathers twice the bytes.
    core::Plan bf16 = tpPlan(1, 2);
    bool seen = false;
    for (const core::OpShape& op : lowered(bf16).ops) {
        if (op.kind == OpShapeKind::TpAllGather && op.bytes == 2 * 8'388'608) seen = true;
    }
    EXPECT_TRUE(seen);
}

// plan --pytorch with Float8 and TP (rule F8-TP): the float8 conversion first (Float8ColwiseParallel
// refuses a module that is not a Float8Linear), then torchao's float8 styles on the block's linears
// and their modules' inputs; the LM head, not converted, keeps ColwiseParallel. Without Float8 none.
TEST(TensorParallelTest, Float8PytorchCodeUsesTorchaosStylesAfterTheConversion) {
    core::Plan plan = tpPlan(2, 2);
    plan.training.all_gather_dtype = core::AllGatherDtype::Fp8;
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    const std::string code = pytorchCode(plan, *mesh, unitsOfPlan(plan));
    const size_t convert = code.find("convert_to_float8_training(");
    const size_t tp = code.find("parallelize_module(");
    ASSERT_NE(convert, std::string::npos) << code;
    ASSERT_NE(tp, std::string::npos) << code;
    EXPECT_LT(convert, tp);
    for (const char* want : {"from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel",
                             "\"self_attn\": PrepareFloat8ModuleInput(input_kwarg_layouts=",
                             "\"mlp\": PrepareFloat8ModuleInput(input_layouts=(Shard(1),)",
                             "\"self_attn.q_proj\": Float8ColwiseParallel()",
                             "\"self_attn.o_proj\": Float8RowwiseParallel(output_layouts=Shard(1))",
                             "\"mlp.down_proj\": Float8RowwiseParallel(output_layouts=Shard(1))",
                             "\"lm_head\": ColwiseParallel("}) {
        EXPECT_NE(code.find(want), std::string::npos) << want << "\n" << code;
    }
    plan.training.all_gather_dtype = core::AllGatherDtype::Param;
    EXPECT_EQ(pytorchCode(plan, *mesh, unitsOfPlan(plan)).find("Float8"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::sim
