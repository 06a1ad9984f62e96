// DeepSeek-V3 (multi-head latent attention, 256 routed experts): what a block saves for backward,
// worked out by hand from transformers' modeling_deepseek_v3.py and checked against
// FSDPMemTracker (docs/validation-memory.md, DeepSeek-V3).
#include <gtest/gtest.h>

#include "core/lower/lower.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "core/program/program.hpp"
#include "tests/core/lowered_program.hpp"

using namespace shardcast::core;

namespace {

Program deepseek(const char* attention) {
    PlanOverrides o;
    o.model = "deepseek-v3";
    o.seq_len = 2048;
    o.attention = attention;
    o.hf_mask = "5.x";
    o.nodes = 2;
    o.gpus_per_node = 8;
    o.scale = "layers=4";  // three dense blocks, then one MoE block
    auto plan = buildPlan(o);
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
    return plan.ok() ? shardcast::core::testing::lowered(*plan) : Program{};
}

}  // namespace

// Eager attention, 2,048 tokens; bytes per token (h 7168, 128 heads, q/k heads of 192 = 128 + 64,
// v heads of 128, q_lora 1536, kv_lora 512):
//   input and post-attention RMSNorms  2 x (4 x 7169 + 2 x 7168)               86,024
//   q_a_proj's input 2 x 7168; q_a_layernorm 4 x 1537 + 2 x 1536; q_b_proj's
//   input 2 x 1536; kv_a_layernorm 4 x 513 + 2 x 512; kv_b_proj's input 2 x 512  30,728
//   q and k (cat outputs, 2 x 128 x 192) and v, a view that keeps kv_b_proj's
//   whole 128 x 256 output: 2 x 81,920                                          163,840
//   the scores: softmax's fp32 output and the bf16 probabilities, 128 x 2048 x 6  1,572,864
//   o_proj's input 2 x 16,384                                                    32,768
// Dense MLP (18,432): (7168 + 4 x 18432) x 2 = 161,792: a dense block 1,886,216 -> x 2048 =
// 4,194,336,768 (the tracker's, to the byte).
// MoE MLP: the router's fp32 input and sigmoid output 4 x (7168 + 256), the top-k weights and
// their normaliser 4 x 9, the gather index 8 x 8; 8 routed experts per token, each keeping the
// gathered input and its MLP (7168 + 4 x 2048) x 2, its bf16 output, the fp32 weight and the fp32
// product index_add_ keeps, two int64 indices: 8 x (30,720 + 14,336 + 28,676 + 16); the shared
// expert (7168 + 4 x 2048) x 2: 620,508 per token, an MoE block 2,536,724 per token plus the
// router weight's fp32 copy 256 x 7168 x 4 = 7,340,032 whatever the tokens: 5,202,550,784
// (the tracker: 5,203,075,072).
TEST(DeepseekTest, EagerBlocksSaveWhatWasWorkedOutByHand) {
    const Program p = deepseek("eager");
    ASSERT_EQ(p.units.size(), 5u);
    for (size_t u = 1; u <= 3; ++u) EXPECT_EQ(p.units[u].activation_bytes, 4'194'336'768) << p.units[u].name;
    EXPECT_EQ(p.units[4].name, "model.layers.3");
    EXPECT_EQ(p.units[4].activation_bytes, 2'536'724 * int64_t{2048} + 7'340'032);
}

// Under SDPA the kernel keeps q, k, v (kv_b_proj's whole output), its output (o_proj's input) and
// an fp32 logsumexp per head instead of the s x s scores: 163,840 + 4 x 128 + 32,768 per token in
// place of the eager 163,840 + 1,572,864 + 32,768.
TEST(DeepseekTest, FlashBlocksKeepNoScores) {
    const Program eager = deepseek("eager");
    const Program flash = deepseek("flash");
    const int64_t per_token_less = 1'572'864 - 4 * 128;
    for (size_t u = 1; u <= 4; ++u) {
        EXPECT_EQ(eager.units[u].activation_bytes - flash.units[u].activation_bytes, per_token_less * 2048)
            << eager.units[u].name;
    }
}
