// What the imported ops save for backward and how many FLOPs they do, against figures worked
// out by hand from the transformers modeling code and from Korthikanti et al. 2022.
#include <cmath>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model.hpp"
#include "core/model/model_io.hpp"

namespace sc = shardcast::core;
namespace v = shardcast::core::variant;
using nlohmann::json;

namespace {

const std::filesystem::path kModels = std::filesystem::path(SHARDCAST_SOURCE_DIR) / "models";

sc::Model load(const std::string& name) {
    auto m = sc::loadModelFile(kModels / (name + ".json"));
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return m.ok() ? std::move(m).value() : sc::Model{};
}

struct Variant {
    uint8_t attention = v::kFlash;
    uint8_t kernels = v::kEagerKernels;
    bool selective = false;  // drop the ops selective activation checkpointing recomputes
};

// Bytes saved for backward by the ops inside module `within`, with 2-byte activations.
double savedBytes(const sc::Model& m, int32_t within, int64_t batch, int64_t seq, Variant var) {
    const int64_t tokens = batch * seq;
    double bytes = 0;
    for (const sc::Op& op : m.ops) {
        if (!op.existsUnder(var.attention, var.kernels) || !m.isWithin(op.module, within)) continue;
        if (var.selective && op.selective_recompute) continue;
        bytes += 2 * op.saved_act.at(tokens, seq) + 4 * op.saved_f32.at(tokens, seq) +
                 1 * op.saved_u8.at(tokens, seq) + 8 * op.saved_i64.at(tokens, seq);
    }
    return bytes;
}

// Forward + backward FLOPs per token over the ops that exist under `var`.
double trainFlopsPerToken(const sc::Model& m, int64_t seq, Variant var, bool matmul_only = false) {
    double flops = 0;
    for (const sc::Op& op : m.ops) {
        if (!op.existsUnder(var.attention, var.kernels)) continue;
        if (matmul_only && op.kind != sc::OpKind::Matmul) continue;
        // Executed FLOPs, as the lowering counts them: a causal kernel skips half the s^2 work.
        sc::Coef executed = op.flops;
        if (op.causal) executed.per_token_seq /= 2;
        flops += executed.at(1, seq) * (1 + op.bwd_flops_factor);
    }
    return flops;
}

// A GPT-2 block as Korthikanti et al. assume it: 16-bit activations, dropout 0.1 everywhere,
// a GeLU that saves only its input, materialised attention scores.
sc::Model korthikantiGpt(const std::string& activation) {
    const json cfg = {{"model_type", "gpt2"},   {"architectures", {"GPT2LMHeadModel"}},
                      {"n_embd", 6144},         {"n_head", 64},
                      {"n_layer", 2},           {"n_positions", 2048},
                      {"n_inner", nullptr},     {"vocab_size", 50257},
                      {"attn_pdrop", 0.1},      {"resid_pdrop", 0.1},
                      {"embd_pdrop", 0.1},      {"activation_function", activation}};
    auto m = sc::importHfConfig(cfg, "korthikanti-gpt", "korthikanti-gpt.json");
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return m.ok() ? std::move(m).value() : sc::Model{};
}

}  // namespace

TEST(ActivationTest, GptBlockMatchesKorthikantiTable2) {
    // Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, no parallelism:
    // s*b*h*(34 + 5*a*s/h) bytes per layer. s=2048, b=4, h=6144, a=64 (reference-cases.json):
    // 34*s*b*h = 1,711,276,032 and 5*a*s^2*b = 5,368,709,120, total 7,079,985,152 (7.080 GB).
    const int64_t s = 2048, b = 4, h = 6144, a = 64;
    const sc::Model m = korthikantiGpt("gelu");
    ASSERT_EQ(m.blocks.size(), 2u);
    const double expected = static_cast<double>(s * b * h) * 34 + 5.0 * a * s * s * b;
    EXPECT_EQ(expected, 7'079'985'152.0);
    for (int32_t block : m.blocks)
        EXPECT_EQ(savedBytes(m, block, b, s, {v::kEagerAttn, v::kEagerKernels, false}), expected);
    EXPECT_NEAR(savedBytes(m, m.blocks[0], b, s, {v::kEagerAttn, v::kEagerKernels, false}) / 1e9, 7.08, 0.0005);
    // Selective recompute drops the 5as^2b attention terms and keeps 34sbh.
    EXPECT_EQ(savedBytes(m, m.blocks[0], b, s, {v::kEagerAttn, v::kEagerKernels, true}), 1'711'276'032.0);
}

TEST(ActivationTest, Gpt2GeluNewEagerSavesFourTensorsFusedSavesOne) {
    // HF's default "gelu_new" (NewGELUActivation) is a Python composite: autograd keeps
    // x, tanh(.), 0.5*x and 1+tanh(.), i.e. 3 more 4h tensors (24sbh bytes) than a fused GeLU.
    const int64_t s = 2048, b = 4, h = 6144, a = 64;
    const sc::Model m = korthikantiGpt("gelu_new");
    const double korthikanti = static_cast<double>(s * b * h) * 34 + 5.0 * a * s * s * b;
    EXPECT_EQ(savedBytes(m, m.blocks[0], b, s, {v::kEagerAttn, v::kFusedKernels, false}), korthikanti);
    EXPECT_EQ(savedBytes(m, m.blocks[0], b, s, {v::kEagerAttn, v::kEagerKernels, false}),
              korthikanti + 24.0 * s * b * h);
}

TEST(ActivationTest, Llama31_8bFlashLayerBytesByHand) {
    // h=4096, 32 heads, 8 kv heads, d=128, I=14336; b=1, s=8192; HF eager modules + flash.
    // Per token, in bytes:
    //   input_layernorm: fp32 copy 4*4097 + bf16 normalised 2*4096      = 24,580
    //   q/k/v input (norm output) 2*4096                                 =  8,192
    //   flash: q 4096 + k 1024 + v 1024 = 6144 bf16 -> 12,288; lse 32 fp32 -> 128; its output
    //   is the storage o_proj saves, counted once there: o_proj input 2*4096 =  8,192
    //   post_attention_layernorm                                         = 24,580
    //   gate/up input 2*4096                                             =  8,192
    //   silu input 2*I + (silu out, up out) 4*I + down input 2*I = 8*I   = 114,688
    //   total 200,840 bytes per token * 8192 tokens = 1,645,281,280 bytes per layer.
    const sc::Model m = load("llama-3.1-8b");
    for (int32_t block : m.blocks)
        EXPECT_EQ(savedBytes(m, block, 1, 8192, {v::kFlash, v::kEagerKernels, false}), 1'645'281'280.0);

    // Fused kernels: norms keep bf16 input + fp32 rstd (2*(8192+4)), SwiGLU keeps gate and up
    // outputs (4*I) + down input (2*I): 16,392 + 8,192 + 12,416 + 8,192 + 8,192 + 86,016 = 139,400.
    EXPECT_EQ(savedBytes(m, m.blocks[0], 1, 8192, {v::kFlash, v::kFusedKernels, false}), 139'400.0 * 8192);

    // Eager attention instead of flash: q, expanded k, expanded v (3*4096 bf16 = 24,576) and per
    // key position 32 heads * (fp32 softmax 4 + bf16 probs 2) = 192 bytes * 8192 = 1,572,864.
    EXPECT_EQ(savedBytes(m, m.blocks[0], 1, 8192, {v::kEagerAttn, v::kEagerKernels, false}),
              (200'840.0 - 12'416 + 24'576 + 1'572'864) * 8192);
    // Selective recompute drops exactly the s^2 tensors.
    EXPECT_EQ(savedBytes(m, m.blocks[0], 1, 8192, {v::kEagerAttn, v::kEagerKernels, true}),
              (200'840.0 - 12'416 + 24'576) * 8192);
}

TEST(ActivationTest, EagerLossKeepsVocabSizedTensorsFusedDoesNot) {
    const sc::Model m = load("llama-3.1-8b");
    const int64_t V = 128256;
    double eager_f32 = 0, fused_f32 = 0;
    for (const sc::Op& op : m.ops) {
        if (op.existsUnder(v::kFlash, v::kEagerKernels)) eager_f32 += op.saved_f32.per_token;
        if (op.existsUnder(v::kFlash, v::kFusedKernels)) fused_f32 += op.saved_f32.per_token;
    }
    // The loss backward's peak is 2 fp32 V-sized tensors (8V bytes), in PyTorch's autograd:
    // NllLossBackward0 makes the fp32 grad of the log-softmax output; LogSoftmaxBackward0
    // (_log_softmax_backward_data) makes the fp32 grad of the fp32 logits while that one is
    // its input; the engine drops its input before ToCopyBackward0 casts to bf16 (4V + 2V).
    // At 2,048 tokens that is 8 * 2048 * 128256 = 2,101,346,304 bytes, not 10V (+525 MB).
    int loss_ops = 0;
    for (const sc::Op& op : m.ops) {
        if (op.kind != sc::OpKind::Loss || !op.existsUnder(v::kFlash, v::kEagerKernels)) continue;
        ++loss_ops;
        EXPECT_EQ(op.bwd_temp_f32.per_token, 2.0 * V);
        EXPECT_EQ(op.bwd_temp_act.per_token, 0.0);
        EXPECT_EQ(2048 * (4 * op.bwd_temp_f32.per_token + 2 * op.bwd_temp_act.per_token), 2'101'346'304.0);
    }
    EXPECT_EQ(loss_ops, 1);
    EXPECT_GE(eager_f32 - fused_f32, static_cast<double>(V));
    const int32_t root = 0;
    double outside_blocks = savedBytes(m, root, 1, 1, {v::kFlash, v::kEagerKernels, false});
    for (int32_t block : m.blocks) outside_blocks -= savedBytes(m, block, 1, 1, {v::kFlash, v::kEagerKernels, false});
    // embedding indices 8 + final norm 24,580 + lm_head input 8,192 + log-softmax 4V + labels 8.
    EXPECT_EQ(outside_blocks, 8 + 24'580 + 8'192 + 4.0 * V + 8);
}

TEST(ActivationTest, TrainingFlopsMatchSixNPlusAttention) {
    const sc::Model m = load("llama-3.1-8b");
    const int64_t s = 8192;
    // Parameters used in matmuls: every projection and the LM head; not the embedding or norms.
    double n_matmul = 0;
    for (const sc::Param& p : m.params) {
        const bool is_matmul = p.name.find("_proj.weight") != std::string::npos || p.name == "lm_head.weight";
        if (is_matmul) n_matmul += static_cast<double>(p.numel());
    }
    EXPECT_EQ(n_matmul, 8030261248.0 - 128256.0 * 4096 - 4096.0 * (2 * 32 + 1));
    // Causal flash attention executes 2 * 4096 * s forward and 2.5x that backward per layer
    // (flash-attention benchmarks/benchmark_flash_attention.py flops()): 7 * 4096 * s, not the
    // 12 * 4096 * s of the MFU convention.
    const double expected = 6 * n_matmul + 7.0 * 32 * 4096 * s;
    // Weight matmuls alone are exactly 6 * N_matmul.
    EXPECT_DOUBLE_EQ(trainFlopsPerToken(m, s, {v::kFlash, v::kEagerKernels}, true), 6 * n_matmul);
    const double flash = trainFlopsPerToken(m, s, {v::kFlash, v::kEagerKernels});
    EXPECT_NEAR(flash / expected, 1.0, 1e-3);
    EXPECT_GT(flash, expected);  // norms, activations and the loss add a little
    // Eager attention computes the whole s x s product with a 2x backward (12 * 4096 * s per layer,
    // 5 * 4096 * s more than flash) and adds the s^2 softmax (5 FLOPs per score, forward + backward).
    const double eager = trainFlopsPerToken(m, s, {v::kEagerAttn, v::kEagerKernels});
    EXPECT_NEAR(eager - flash, 32 * 5.0 * 4096 * s + 32 * 2 * 5.0 * 32 * s, 1.0);
}

TEST(ActivationTest, MixtralExpertsDoTopKOfTheDenseMlpWork) {
    const sc::Model m = load("mixtral-8x7b");
    const int32_t experts = m.findModule("model.layers.0.block_sparse_moe.experts");
    ASSERT_GE(experts, 0);
    double expert_flops = 0, gathered = 0;
    for (const sc::Op& op : m.ops) {
        if (!m.isWithin(op.module, experts) || op.kind != sc::OpKind::Matmul) continue;
        expert_flops += op.flops.per_token;
        gathered += op.saved_act.per_token;
    }
    const double h = 4096, I = 14336, k = 2;
    EXPECT_DOUBLE_EQ(expert_flops, k * 3 * 2 * h * I);
    // w1 keeps the gathered tokens (h*k per token in total), w2 its input (I*k).
    EXPECT_DOUBLE_EQ(gathered, k * h + k * I);
    // Each expert's ops are attached to its own module, so FSDP can wrap experts separately.
    const int32_t e3 = m.findModule("model.layers.0.block_sparse_moe.experts.3");
    int ops_in_e3 = 0;
    for (const sc::Op& op : m.ops) ops_in_e3 += m.isWithin(op.module, e3) ? 1 : 0;
    EXPECT_GT(ops_in_e3, 3);
}

TEST(ActivationTest, MixtralRoutingProductIsSavedTwice) {
    // Per expert, HF's MixtralSparseMoeBlock computes expert(x) * routing_weight (MulBackward0 saves
    // both operands) and index_add_s the product into the output (IndexAddBackward0 saves its
    // `source`): 2 h + 1 elements per routed token. Top-2 of 8 over 2,048 tokens: 512 tokens per
    // expert, (2 x 4096 + 1) x 512 x 2 B = 8,389,632 B per expert, FSDPMemTracker's two
    // [512, 4096] bf16 tensors and the [512, 1] weight (docs/validation-memory.md, Mixtral).
    const sc::Model m = load("mixtral-8x7b");
    int scales = 0;
    for (const sc::Op& op : m.ops) {
        if (op.name != "route_scale") continue;
        ++scales;
        EXPECT_DOUBLE_EQ(op.saved_act.at(2048, 2048) * 2, 8'389'632.0);
    }
    EXPECT_EQ(scales, 32 * 8);
}

TEST(ActivationTest, NeoxParallelResidualSavesTheSharedNormInputOnce) {
    const sc::Model m = load("pythia-160m");
    const int32_t ln1 = m.findModule("gpt_neox.layers.0.input_layernorm");
    const int32_t ln2 = m.findModule("gpt_neox.layers.0.post_attention_layernorm");
    EXPECT_EQ(savedBytes(m, ln1, 1, 1, {}), 2 * 768.0);
    EXPECT_EQ(savedBytes(m, ln2, 1, 1, {}), 0.0);
}

TEST(ActivationTest, OpsAreInForwardOrderAndAttachedToLeafModules) {
    const sc::Model m = load("llama-3.1-8b");
    std::vector<std::string> order;
    for (const sc::Op& op : m.ops)
        if (op.existsUnder(v::kFlash, v::kEagerKernels) && m.isWithin(op.module, m.blocks[0]))
            order.push_back(m.modules[static_cast<size_t>(op.module)].name + ":" + op.name);
    const std::string p = "model.layers.0.";
    const std::vector<std::string> expected = {
        p + "input_layernorm:rms_norm", p + "self_attn.q_proj:q_proj", p + "self_attn.k_proj:k_proj",
        p + "self_attn.v_proj:v_proj", p + "self_attn:rope", p + "self_attn:attn.core",
        p + "self_attn.o_proj:o_proj", "model.layers.0:residual", p + "post_attention_layernorm:rms_norm",
        p + "mlp.gate_proj:gate_proj", p + "mlp.up_proj:up_proj", p + "mlp.act_fn:act_fn", p + "mlp:mul",
        p + "mlp.down_proj:down_proj", "model.layers.0:residual"};
    EXPECT_EQ(order, expected);
    EXPECT_EQ(m.ops.front().name, "embedding");
    EXPECT_EQ(m.modules[static_cast<size_t>(m.ops.back().module)].name, "");  // loss runs at the root
}

TEST(ActivationTest, EagerRmsNormBackwardHoldsFiveFp32Copies) {
    // HF LlamaRMSNorm: x32 = x.to(fp32); var = x32.pow(2).mean(-1); x32 * rsqrt(var + eps).
    // Backward (torch/csrc/autograd/FunctionsManual.cpp): mul_tensor_backward's grad of x32
    // waits in the engine's input buffer for the second one; mean_backward makes an h-sized fp32
    // grad (grad.expand(..) / h); pow_backward, grad * (exp * self.pow(exp - 1)), holds self.pow(1),
    // its product with 2 and the result at once: 2 + 3 = 5 fp32 tensors of h per token.
    // Llama-2-7B, h = 4096, at 4,096 tokens: 5 * 4 * 4096 * 4096 = 335,544,320 bytes.
    const sc::Model m = load("llama-2-7b");
    int eager_norms = 0;
    for (const sc::Op& op : m.ops) {
        if (op.kind != sc::OpKind::Norm) continue;
        if (op.existsUnder(v::kFlash, v::kEagerKernels)) {
            ++eager_norms;
            EXPECT_EQ(op.bwd_temp_f32.at(4096, 4096) * 4, 335'544'320.0);
        } else {
            EXPECT_EQ(op.bwd_temp_f32.per_token, 0.0);  // the fused kernel keeps no fp32 copy
        }
    }
    EXPECT_EQ(eager_norms, 2 * 32 + 1);  // two per block and the final norm
}

TEST(ActivationTest, EagerSoftmaxBackwardHoldsTwoScoreSizedGradients) {
    // HF eager attention: softmax(scores, dtype=fp32).to(bf16), then probs @ v. Backward: PV's
    // gradient of the probabilities (bf16, beside the saved probabilities), upcast by
    // ToCopyBackward, then _softmax_backward_data's output while that fp32 gradient is alive: two
    // fp32 [b, heads, s, s] tensors, FSDPMemTracker's Temp at its peak in a Phi-3 block (32 heads,
    // s = 1,024: 2 x 134,217,728 B). GPT-2 runs its softmax in bf16: two bf16 ones.
    const sc::Model phi3 = load("phi-3-mini-4k");
    const int64_t s = 1024;
    int softmaxes = 0, pvs = 0;
    for (const sc::Op& op : phi3.ops) {
        if (!op.existsUnder(v::kEagerAttn, v::kEagerKernels)) continue;
        if (op.name == "attn.softmax") {
            ++softmaxes;
            EXPECT_EQ(op.bwd_temp_f32.at(s, s) * 4, 2 * 134'217'728.0);
            EXPECT_EQ(op.bwd_temp_f32_tensors, 2);
            EXPECT_EQ(op.bwd_temp_act.at(s, s), 0.0);
        } else if (op.name == "attn.pv") {
            ++pvs;
            EXPECT_EQ(op.bwd_temp_act.at(s, s) * 2, 67'108'864.0);  // 32 x 1024 x 1024 bf16
        }
    }
    EXPECT_EQ(softmaxes, 32);
    EXPECT_EQ(pvs, 32);
    const sc::Model gpt2 = load("gpt2");  // 12 heads
    for (const sc::Op& op : gpt2.ops) {
        if (op.name != "attn.softmax" || !op.existsUnder(v::kEagerAttn, v::kEagerKernels)) continue;
        EXPECT_EQ(op.bwd_temp_act.at(s, s) * 2, 2 * 12 * 1024 * 1024 * 2.0);
        EXPECT_EQ(op.bwd_temp_f32.at(s, s), 0.0);
    }
}

TEST(ActivationTest, Transformers45MaskAddsTheMaskAndRepeatedKv) {
    // transformers 4.5x sdpa_attention_forward with a materialised mask: use_gqa_in_sdpa() is
    // false, so repeat_kv expands K and V from 8 to 32 heads: 2 * (4096 - 1024) = 6,144 more bf16
    // per token; the [b, 1, s, s] mask, converted to bf16 in scaled_dot_product_attention, is
    // saved per layer: 1 element per token per key position. At b = 1, s = 2048:
    // 2 * 2048 * (6144 + 2048) = 33,554,432 bytes more per layer.
    const sc::Model m = load("llama-3.1-8b");
    int flash_ops = 0;
    for (const sc::Op& op : m.ops) {
        if (op.kind != sc::OpKind::Attention || !op.existsUnder(v::kFlash, v::kEagerKernels)) continue;
        ++flash_ops;
        EXPECT_EQ(2 * (op.saved_act_hf_mask.at(2048, 2048) + op.saved_act_repeat_kv.at(2048, 2048)), 33'554'432.0);
        // The repeated K/V alone (what torchtitan's Llama also keeps): 2 * 2048 * 6144.
        EXPECT_EQ(2 * op.saved_act_repeat_kv.at(2048, 2048), 25'165'824.0);
    }
    EXPECT_EQ(flash_ops, 32);
    // GPT-2 has as many K/V heads as query heads: only the mask is added.
    const sc::Model g = load("gpt2");
    for (const sc::Op& op : g.ops) {
        if (op.kind == sc::OpKind::Attention && op.existsUnder(v::kFlash, v::kEagerKernels)) {
            EXPECT_EQ(op.saved_act_hf_mask.per_token, 0.0);
            EXPECT_EQ(op.saved_act_repeat_kv.per_token, 0.0);
        }
    }
}
