// Activation checkpointing per block ("blocks:MODE*N,..."): spelling, resolution against the
// model's block count, the lowering's per-block segments, and the plan file round trip.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "tests/core/lowered_program.hpp"

using namespace shardcast::core;
using shardcast::core::testing::lowered;

namespace {

// Llama-3.1-8B (32 blocks; config.json: hidden 4096, intermediate 14336, 32 heads of 128, 8 KV
// heads) FULL_SHARD on 8 H100s, one sequence of 8,192 tokens, bf16, flash attention, one unit per
// block: unit i + 1 is block i.
Plan llama8B(const std::string& ac) {
    auto model = resolveModel("llama-3.1-8b");
    EXPECT_TRUE(model.ok());
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = 8192;
    auto spec = parseAcSpec(ac);
    EXPECT_TRUE(spec.has_value()) << ac;
    if (spec) {
        EXPECT_FALSE(resolveAcBlocks(*spec, 32, "test").has_value()) << ac;
        applyAc(plan.training, *spec);
    }
    return plan;
}

int64_t activationOf(const Program& p, size_t unit) { return p.units[unit].activation_bytes; }

int64_t totalActivation(const Program& p) {
    int64_t sum = 0;
    for (const UnitInfo& u : p.units) sum += u.activation_bytes;
    return sum;
}

int recomputeTasks(const Program& p) {
    int n = 0;
    for (const Task& t : p.tasks) n += t.kind == TaskKind::Recompute;
    return n;
}

constexpr int64_t kTokens = 8192;
constexpr int64_t kBlockInput = kTokens * 4096 * 2;  // b*s*h bf16: what a full block keeps
// Per-op SAC keeps, per block (lowering_test PerOpSacKeepsOddMatmulsAndAttention, worked by hand):
// input 4096 + q 4096 + v 1024 + SDPA out 4096 + gate 14336 + down 4096 bf16 elements and 32 fp32
// logsumexp per token; its recompute skips the q, v, gate, down GEMMs and the attention.
constexpr int64_t kOpBlockKept = kTokens * 63616;
constexpr int64_t kOpSkippedFlops = kTokens * 2 * 4096 * (4096 + 1024 + 2 * 14336) + kTokens * 2 * 4096 * 8192;

TEST(BlockAcTest, SpellingsRunsAndDescription) {
    auto spec = parseAcSpec("blocks:full*8,none*24");
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ(spec->mode, Checkpointing::Blocks);
    const std::vector<AcRun> expected{{Checkpointing::Full, 8}, {Checkpointing::None, 24}};
    EXPECT_EQ(spec->runs, expected);
    EXPECT_EQ(acString(*spec), "blocks:full*8,none*24");
    EXPECT_EQ(acDescription(*spec, true).substr(0, 40), "per block: full on blocks 0-7, none on 8");
    EXPECT_NE(acDescription(*spec, true).find("none on 8-31"), std::string::npos);
    // Adjacent runs of one mode merge; mode names are case-insensitive as elsewhere.
    auto merged = parseAcSpec("BLOCKS:Full*2,full*3,op*1,none*26");
    ASSERT_TRUE(merged.has_value());
    EXPECT_EQ(acString(*merged), "blocks:full*5,op*1,none*26");
    EXPECT_NE(acDescription(*merged, true).find("op on 5,"), std::string::npos) << acDescription(*merged, true);
    // The blocks of each run, 0-based.
    EXPECT_EQ(blockAcMode(merged->runs, 0), Checkpointing::Full);
    EXPECT_EQ(blockAcMode(merged->runs, 4), Checkpointing::Full);
    EXPECT_EQ(blockAcMode(merged->runs, 5), Checkpointing::Op);
    EXPECT_EQ(blockAcMode(merged->runs, 6), Checkpointing::None);
    EXPECT_EQ(blockAcMode(merged->runs, 31), Checkpointing::None);
}

TEST(BlockAcTest, BadSpecsAreRefusedWithTheReason) {
    const std::pair<const char*, const char*> cases[] = {
        {"blocks", "blocks needs its runs"},
        {"blocks:", "at least one run"},
        {"blocks:full", "is not MODE*N"},
        {"blocks:full*0,none*32", "from 1 to"},
        {"blocks:full*-1,none*33", "from 1 to"},
        {"blocks:full*99999999999999999999999", "from 1 to"},
        {"blocks:full*1000001", "from 1 to"},
        {"blocks:full*8x,none*24", "from 1 to"},
        {"blocks:layer*2,none*30", "none, op or full"},
        {"blocks:attn-core*32", "none, op or full"},
        {"blocks:selective*32", "none, op or full"},
        {"blocks:full*8,", "is not MODE*N"},
        {"blocks:*8", "none, op or full"},
    };
    for (const auto& [text, reason] : cases) {
        EXPECT_FALSE(parseAcSpec(text).has_value()) << text;
        const std::string why = acSpecError(text);
        EXPECT_NE(why.find(reason), std::string::npos) << text << ": " << why;
        EXPECT_NE(why.find("blocks:MODE*N"), std::string::npos) << why;  // the valid spellings
    }
    // The total is checked against the model: the error names the field, the total and the count.
    auto short_spec = parseAcSpec("blocks:full*8,none*23");
    ASSERT_TRUE(short_spec.has_value());
    auto err = resolveAcBlocks(*short_spec, 32, "--ac");
    ASSERT_TRUE(err.has_value());
    EXPECT_NE(err->find("--ac"), std::string::npos) << *err;
    EXPECT_NE(err->find("covers 31 blocks but the model has 32"), std::string::npos) << *err;
    // One mode for every block is that whole-model mode.
    auto all_full = parseAcSpec("blocks:full*20,full*12");
    ASSERT_TRUE(all_full.has_value());
    EXPECT_FALSE(resolveAcBlocks(*all_full, 32, "--ac").has_value());
    EXPECT_EQ(all_full->mode, Checkpointing::Full);
    EXPECT_TRUE(all_full->runs.empty());
    EXPECT_EQ(acString(*all_full), "full");
    // A plan that reaches validation with a wrong total (built in code) is refused there.
    Plan plan = llama8B("none");
    plan.training.ac = Checkpointing::Blocks;
    plan.training.ac_blocks = {{Checkpointing::Full, 1}};
    auto mesh = validatePlan(plan);
    ASSERT_FALSE(mesh.ok());
    EXPECT_NE(mesh.error().message.find("training.ac"), std::string::npos) << mesh.error().message;
}

// Block 0 under checkpoint_wrapper, the rest keep everything: block 0 keeps only its input
// (b*s*h bf16), every other block what it keeps without checkpointing, and the step runs block
// 0's forward once more (its recompute is its whole forward).
TEST(BlockAcTest, FirstBlockFullKeepsItsInputAndRecomputesOneForward) {
    const Program none = lowered(llama8B("none"));
    const Program first = lowered(llama8B("blocks:full*1,none*31"));
    ASSERT_EQ(none.units.size(), 33u);
    ASSERT_EQ(first.units.size(), 33u);
    EXPECT_EQ(activationOf(first, 1), kBlockInput);
    for (size_t u = 2; u < 33; ++u) EXPECT_EQ(activationOf(first, u), activationOf(none, u)) << u;
    EXPECT_EQ(totalActivation(first), totalActivation(none) - activationOf(none, 1) + kBlockInput);
    EXPECT_EQ(recomputeTasks(first), 1);
    EXPECT_EQ(recomputeTasks(none), 0);
    EXPECT_DOUBLE_EQ(first.hardware_flops_per_step - none.hardware_flops_per_step,
                     static_cast<double>(none.units[1].fwd_flops));
}

// Op blocks get torchtitan's per-op SAC, full blocks checkpoint_wrapper, in one plan: blocks 0-15
// full, 16-31 op. Against whole-model full, each op block keeps the hand-worked SAC set and skips
// the kept ops' recompute; the reuse of identical blocks must not carry one mode into the other.
TEST(BlockAcTest, FullThenOpBlocksEachTakeTheirOwnMode) {
    const Program full = lowered(llama8B("full"));
    const Program mixed = lowered(llama8B("blocks:full*16,op*16"));
    for (size_t u = 1; u <= 16; ++u) EXPECT_EQ(activationOf(mixed, u), kBlockInput) << u;
    for (size_t u = 17; u <= 32; ++u) EXPECT_EQ(activationOf(mixed, u), kOpBlockKept) << u;
    EXPECT_EQ(recomputeTasks(mixed), 32);
    EXPECT_DOUBLE_EQ(full.hardware_flops_per_step - mixed.hardware_flops_per_step,
                     16.0 * static_cast<double>(kOpSkippedFlops));
    // And the other way round: op first, then none.
    const Program op_none = lowered(llama8B("blocks:op*3,none*29"));
    const Program none = lowered(llama8B("none"));
    for (size_t u = 1; u <= 3; ++u) EXPECT_EQ(activationOf(op_none, u), kOpBlockKept) << u;
    for (size_t u = 4; u <= 32; ++u) EXPECT_EQ(activationOf(op_none, u), activationOf(none, u)) << u;
    EXPECT_EQ(recomputeTasks(op_none), 3);
    EXPECT_DOUBLE_EQ(op_none.hardware_flops_per_step - none.hardware_flops_per_step,
                     3.0 * static_cast<double>(none.units[1].fwd_flops - kOpSkippedFlops));
}

// The plan file keeps the runs, and refuses a file whose runs do not cover the model.
TEST(BlockAcTest, PlanFileRoundTrip) {
    const Plan plan = llama8B("blocks:full*8,op*8,none*16");
    const nlohmann::json j = planToJson(plan);
    EXPECT_EQ(j.at("training").at("ac"), "blocks:full*8,op*8,none*16");
    auto back = planFromJson(j, "plan.json", ".");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->training.ac, Checkpointing::Blocks);
    EXPECT_EQ(back->training.ac_blocks, plan.training.ac_blocks);
    EXPECT_EQ(planToJson(*back).dump(), j.dump());

    nlohmann::json wrong = j;
    wrong["training"]["ac"] = "blocks:full*8,none*16";
    auto refused = planFromJson(wrong, "plan.json", ".");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("plan.json: training.ac"), std::string::npos) << refused.error().message;
    EXPECT_NE(refused.error().message.find("the model has 32"), std::string::npos) << refused.error().message;

    nlohmann::json uniform = j;
    uniform["training"]["ac"] = "blocks:op*32";
    auto normalised = planFromJson(uniform, "plan.json", ".");
    ASSERT_TRUE(normalised.ok()) << normalised.error().message;
    EXPECT_EQ(normalised->training.ac, Checkpointing::Op);
    EXPECT_TRUE(normalised->training.ac_blocks.empty());
}

}  // namespace
