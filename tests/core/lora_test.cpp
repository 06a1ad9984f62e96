// LoRA (issue 26, item 1): the adapters PEFT adds, the frozen base, and what autograd then saves
// and computes (rule G1), against figures worked out by hand for Llama-3.1-8B.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/lower/lower.hpp"
#include "core/memory/memory.hpp"
#include "core/model/model_io.hpp"
#include "core/model/model_lora.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "core/program/program.hpp"

#include <nlohmann/json.hpp>

using namespace shardcast::core;

namespace {

// Llama-3.1-8B: h 4096, 32 heads of 128, 8 KV heads (kvd 1024), MLP 14336, vocab 128256.
constexpr int64_t kH = 4096, kKvd = 1024, kI = 14336, kT = 2048, kR = 16;

Plan llama8b(const char* lora) {
    PlanOverrides o;
    o.model = "llama-3.1-8b";
    o.seq_len = kT;
    o.hf_mask = "5.x";
    if (lora) o.lora = lora;
    auto plan = buildPlan(o);
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
    return std::move(plan).value();
}

Program lowered(const Plan& plan) {
    auto mesh = validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    Program p;
    auto st = lower(plan, *mesh, p);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    return p;
}

int32_t unitNamed(const Program& p, const std::string& name) {
    for (size_t u = 0; u < p.units.size(); ++u) {
        if (p.units[u].name == name) return static_cast<int32_t>(u);
    }
    ADD_FAILURE() << "no unit " << name;
    return -1;
}

using Gemm = std::array<int64_t, 3>;  // m, n, k

// The GEMMs of a unit's backward task (one micro-batch), sorted.
std::vector<Gemm> backwardGemms(const Program& p, int32_t unit) {
    std::vector<Gemm> out;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::Backward || t.unit != unit) continue;
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const OpShape& op = p.ops[t.ops.offset + i];
            if (op.kind == OpShapeKind::Gemm && op.batch == 1) out.push_back({op.m, op.n, op.k});
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

int64_t flopsOf(const std::vector<Gemm>& g) {
    int64_t f = 0;
    for (const Gemm& x : g) f += 2 * x[0] * x[1] * x[2];
    return f;
}

std::vector<Gemm> sorted(std::vector<Gemm> g) {
    std::sort(g.begin(), g.end());
    return g;
}

}  // namespace

TEST(LoraTest, AdaptersArePeftsParametersBesideTheFrozenBaseLayer) {
    const Plan plan = llama8b("16");
    const Model& m = *plan.model;
    ASSERT_TRUE(plan.base_model);
    // q/k/v/o of 32 layers: [16, in] and [out, 16] each.
    const int64_t per_layer = kR * (kH + kH) + kR * (kH + kKvd) * 2 + kR * (kH + kH);
    const LoraSummary s = loraSummary(m);
    EXPECT_EQ(s.modules, 128);
    EXPECT_EQ(s.adapter_params, 32 * per_layer);
    EXPECT_EQ(s.adapter_params, 13'631'488);
    EXPECT_EQ(s.names, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
    EXPECT_EQ(s.adapted.front(), "model.layers.0.self_attn.q_proj");
    EXPECT_FALSE(s.names_ambiguous);  // every q/k/v/o_proj is adapted: PEFT's names suffice
    // GPT-2's default adapts attn.c_proj but not mlp.c_proj: the names alone would match both.
    PlanOverrides g;
    g.model = "gpt2";
    g.lora = "8";
    auto gpt2 = buildPlan(g);
    ASSERT_TRUE(gpt2.ok());
    const LoraSummary gs = loraSummary(*gpt2->model);
    EXPECT_EQ(gs.modules, 24);
    EXPECT_TRUE(gs.names_ambiguous);
    EXPECT_EQ(m.numParams(), plan.base_model->numParams() + s.adapter_params);
    // named_parameters() order as PEFT gives it: the base layer, then lora_A and lora_B.
    auto at = [&](const std::string& name) {
        for (size_t i = 0; i < m.params.size(); ++i) {
            if (m.params[i].name == name) return static_cast<int64_t>(i);
        }
        return int64_t{-1};
    };
    const int64_t q = at("model.layers.0.self_attn.q_proj.base_layer.weight");
    ASSERT_GE(q, 0);
    EXPECT_EQ(at("model.layers.0.self_attn.q_proj.lora_A.default.weight"), q + 1);
    EXPECT_EQ(at("model.layers.0.self_attn.q_proj.lora_B.default.weight"), q + 2);
    EXPECT_EQ(m.params[static_cast<size_t>(q + 2)].shape, (std::vector<int64_t>{kH, kR}));
    EXPECT_EQ(at("model.layers.0.mlp.gate_proj.weight") >= 0, true);  // not a target: untouched
}

TEST(LoraTest, OnlyTheAdaptersHaveGradientsAndOptimizerState) {
    const Plan plan = llama8b("16");
    const Program p = lowered(plan);
    int64_t trainable = 0, rs = 0;
    for (const UnitInfo& u : p.units) trainable += u.trainable_params;
    EXPECT_EQ(trainable, 13'631'488);
    for (const Task& t : p.tasks) {
        if (t.kind == TaskKind::ReduceScatter) rs += t.comm_bytes;
    }
    // fp32 reduce-scatter of the adapters' gradients only (no dim-0 padding at 8 ranks: every
    // adapter has 16, 1024 or 4096 rows).
    EXPECT_EQ(rs, 13'631'488 * 4);
    // The frozen base is still all-gathered: forward and backward gather the whole model (bf16),
    // as without LoRA, plus the adapters.
    const Program full = lowered(llama8b(nullptr));
    int64_t ag = 0, ag_full = 0;
    for (const Task& t : p.tasks) ag += t.kind == TaskKind::AllGather ? t.comm_bytes : 0;
    for (const Task& t : full.tasks) ag_full += t.kind == TaskKind::AllGather ? t.comm_bytes : 0;
    // Each block is gathered twice (forward, backward); the root once: 32 x 2 x per-layer adapters.
    EXPECT_EQ(ag - ag_full, 2 * 32 * (13'631'488 / 32) * 2);
}

// Rule G1 in backward: a frozen linear computes its input gradient only (one GEMM, not two), and
// none at all where its input needs no gradient (layer 0's q/k/v: the frozen embedding's output);
// an adapter computes its weight gradient, and its input gradient where that input needs one.
TEST(LoraTest, BackwardHasOneInputGradientGemmPerFrozenLinear) {
    const Plan plan = llama8b("16");
    const Program p = lowered(plan);
    auto dgrad = [](int64_t in, int64_t out) { return Gemm{kT, in, out}; };
    auto wgrad = [](int64_t in, int64_t out) { return Gemm{out, in, kT}; };
    auto adapter = [&](std::vector<Gemm>& g, int64_t in, int64_t out, bool input_grad) {
        if (input_grad) g.push_back(dgrad(in, kR));
        g.push_back(wgrad(in, kR));    // lora_A
        g.push_back(dgrad(kR, out));   // lora_B: its input (lora_A's output) needs a gradient
        g.push_back(wgrad(kR, out));
    };
    std::vector<Gemm> layer1 = {dgrad(kH, kH), dgrad(kH, kKvd), dgrad(kH, kKvd), dgrad(kH, kH),
                                dgrad(kH, kI), dgrad(kH, kI), dgrad(kI, kH)};
    for (auto [in, out] : {std::pair{kH, kH}, {kH, kKvd}, {kH, kKvd}, {kH, kH}}) adapter(layer1, in, out, true);
    EXPECT_EQ(backwardGemms(p, unitNamed(p, "model.layers.1")), sorted(layer1));
    // Layer 0: no q/k/v base GEMM and no adapter dgrad there; o_proj and the MLP as in layer 1.
    std::vector<Gemm> layer0 = {dgrad(kH, kH), dgrad(kH, kI), dgrad(kH, kI), dgrad(kI, kH)};
    for (auto [in, out] : {std::pair{kH, kH}, {kH, kKvd}, {kH, kKvd}}) adapter(layer0, in, out, false);
    adapter(layer0, kH, kH, true);
    EXPECT_EQ(backwardGemms(p, unitNamed(p, "model.layers.0")), sorted(layer0));
    // By hand: 2 T (h h + 2 h kvd + h h + 3 h I) = 4096 x 218,103,808 FLOPs for the base dgrads, and
    // 2 x 2 T r (in + out) per adapter.
    const int64_t base = 2 * kT * (kH * kH + 2 * kH * kKvd + kH * kH + 3 * kH * kI);
    const int64_t adapters = 2 * 2 * kT * kR * ((kH + kH) + 2 * (kH + kKvd) + (kH + kH));
    EXPECT_EQ(base, 893'353'197'568);
    EXPECT_EQ(flopsOf(backwardGemms(p, unitNamed(p, "model.layers.1"))), base + adapters);
    // Full fine-tuning of the same layer: dgrad and wgrad of every linear, twice the base.
    const Program full = lowered(llama8b(nullptr));
    EXPECT_EQ(flopsOf(backwardGemms(full, unitNamed(full, "model.layers.1"))), 2 * base);
    // The LM head is frozen: its dgrad only.
    EXPECT_EQ(backwardGemms(p, unitNamed(p, "(root)")), (std::vector<Gemm>{dgrad(kH, 128256)}));
}

// Rule G1 in forward: autograd keeps a frozen linear's input only when another op needs it, eager
// RMSNorm's `weight * x` operand only for a trainable weight, and nothing where nothing requires
// grad. Per layer (bf16 2 B, fp32 4 B, T = 2048), held against FSDPMemTracker in
// docs/validation-memory.md: norm fp32 input + rsqrt (h + 1) x 4 x T twice; the normed input the
// adapters read, h x 2 x T; four lora_A outputs, r x 2 x T each; SDPA's q, k, v
// ((h + 2 kvd) x 2 x T), logsumexp (32 x 4 x T) and output (o_proj's input, h x 2 x T); SiLU's
// input and the product's two operands, 3 x I x 2 x T. Layer 0 has no norm input saved: nothing
// before it requires grad.
TEST(LoraTest, ActivationsAreWhatAutogradSavesWithTheBaseFrozen) {
    const Program p = lowered(llama8b("16"));
    const int64_t norm = (kH + 1) * 4 * kT;
    const int64_t layer = 2 * norm + kH * 2 * kT + 4 * kR * 2 * kT + (kH + 2 * kKvd) * 2 * kT + 32 * 4 * kT +
                          kH * 2 * kT + 3 * kI * 2 * kT;
    EXPECT_EQ(layer, 302'530'560);
    EXPECT_EQ(p.units[static_cast<size_t>(unitNamed(p, "model.layers.1"))].activation_bytes, layer);
    EXPECT_EQ(p.units[static_cast<size_t>(unitNamed(p, "model.layers.0"))].activation_bytes, layer - norm);
    // Full fine-tuning keeps besides: both norms' bf16 `weight * x` operands, the MLP input and
    // down_proj's input (gate, up and q share theirs with the adapters' read above): 3 h + I per token.
    const Program full = lowered(llama8b(nullptr));
    EXPECT_EQ(full.units[static_cast<size_t>(unitNamed(full, "model.layers.1"))].activation_bytes,
              layer - 4 * kR * 2 * kT + (3 * kH + kI) * 2 * kT);
}

TEST(LoraTest, TargetsFollowPeftsSuffixRuleAndBadOnesAreNamed) {
    auto base = resolveModel("llama-3.1-8b");
    ASSERT_TRUE(base.ok());
    auto mlp = loraTargetModules(*base, {"gate_proj", "mlp.down_proj"}, "--lora");
    ASSERT_TRUE(mlp.ok());
    EXPECT_EQ(mlp->size(), 64u);
    auto none = loraTargetModules(*base, {"proj"}, "--lora");  // a suffix must follow a dot
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().message.find("--lora: target 'proj' matches no linear module of llama-3.1-8b"),
              std::string::npos)
        << none.error().message;
    EXPECT_NE(none.error().message.find("down_proj, gate_proj, k_proj, lm_head"), std::string::npos);
    auto gpt2 = resolveModel("gpt2");
    ASSERT_TRUE(gpt2.ok());
    auto attn = loraTargetModules(*gpt2, {}, "--lora");  // default: the attention projections
    ASSERT_TRUE(attn.ok());
    EXPECT_EQ(attn->size(), 24u);  // attn.c_attn and attn.c_proj of 12 blocks, not mlp.c_proj
    for (const char* bad : {"", "x", "-1", "16:", "16:q_proj,,v_proj", "0:q_proj", "65537", "16:q proj"}) {
        EXPECT_FALSE(parseLora(bad, "--lora").ok()) << bad;
    }
    auto ok = parseLora("8:q_proj,v_proj,q_proj", "--lora");
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->targets, (std::vector<std::string>{"q_proj", "v_proj"}));
    EXPECT_EQ(loraString(*ok), "8:q_proj,v_proj");
}

TEST(LoraTest, PlanFilesKeepLoraAndReapplyItFromTheBaseModel) {
    Plan plan = llama8b("16:q_proj,v_proj");
    const nlohmann::json j = planToJson(plan);
    EXPECT_EQ(j["training"]["lora"], "16:q_proj,v_proj");
    auto back = planFromJson(j, "plan.json", ".");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->training.lora, plan.training.lora);
    EXPECT_EQ(back->model->numParams(), plan.model->numParams());
    // Changing the rank starts from the base model, not from the adapted one.
    PlanOverrides o;
    o.base = std::make_shared<const Plan>(*back);
    o.lora = "8";
    auto again = buildPlan(o);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(loraSummary(*again->model).modules, 128);
    EXPECT_EQ(again->model->numParams(), plan.base_model->numParams() + 13'631'488 / 2);
    o.lora = "0";
    auto off = buildPlan(o);
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->base_model);
    EXPECT_EQ(off->model->numParams(), plan.base_model->numParams());
    auto bad = nlohmann::json(j);
    bad["training"]["lora"] = "16:nope";
    auto refused = planFromJson(bad, "plan.json", ".");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("plan.json: training.lora: target 'nope' matches no linear module"),
              std::string::npos)
        << refused.error().message;
}
