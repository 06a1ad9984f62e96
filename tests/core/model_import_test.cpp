// Importing HuggingFace configs: parameter counts, PyTorch names and shapes, and input errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model.hpp"
#include "core/model/model_io.hpp"

namespace sc = shardcast::core;
using nlohmann::json;

namespace {

const std::filesystem::path kModels = std::filesystem::path(SHARDCAST_SOURCE_DIR) / "models";

sc::Model load(const std::string& name) {
    auto m = sc::loadModelFile(kModels / (name + ".json"));
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return m.ok() ? std::move(m).value() : sc::Model{};
}

const sc::Param* findParam(const sc::Model& m, const std::string& name) {
    for (const sc::Param& p : m.params)
        if (p.name == name) return &p;
    return nullptr;
}

std::vector<int64_t> shapeOf(const sc::Model& m, const std::string& name) {
    const sc::Param* p = findParam(m, name);
    EXPECT_NE(p, nullptr) << "no parameter " << name;
    return p ? p->shape : std::vector<int64_t>{};
}

// Writes `text` to a fresh file under the test's temp dir and returns its path.
std::filesystem::path writeTemp(const std::string& file, const std::string& text) {
    const auto dir = std::filesystem::temp_directory_path() / "shardcast_model_import_test";
    std::filesystem::create_directories(dir);
    const auto path = dir / file;
    std::ofstream(path) << text;
    return path;
}

std::string errorOf(const std::filesystem::path& path) {
    auto m = sc::loadModelFile(path);
    EXPECT_FALSE(m.ok()) << path << " loaded but should not";
    return m.ok() ? "" : m.error().message;
}

}  // namespace

TEST(ModelImportTest, EveryBundledConfigHasTheReferenceParameterCount) {
    std::ifstream in(SHARDCAST_REFERENCE_FILE);
    const json ref = json::parse(in).at("param_counts");
    // Counts of the configs added with the importer (the model cards' totals, checked against
    // the transformers layouts: e.g. Qwen2-7B = 28 * 233,057,792 + 2 * 152064 * 3584 + 3584).
    std::map<std::string, int64_t> expected = {
        {"qwen2-7b", 7'615'616'512}, {"gemma-2-9b", 9'241'705'984}, {"pythia-160m", 162'322'944},
        {"tiny-llama", 3'950'848}, {"tiny-gpt2", 3'945'984},  // tiny ones: see TinyModels* below
        // Qwen3-8B: 36 * (2 * 4096^2 + 2 * 1024 * 4096 + 3 * 4096 * 12288 + 2 * 128 + 2 * 4096) + 2 * 151936
        // * 4096 + 4096 (q_norm and k_norm: one head_dim weight each).
        {"qwen3-8b", 8'190'735'360},
        // OLMo-2-7B: 32 * (4 * 4096^2 + 2 * 4096 (q_norm, k_norm over all heads) + 3 * 4096 * 11008 + 2 * 4096)
        // + 2 * 100352 * 4096 + 4096, as transformers' Olmo2ForCausalLM counts it.
        {"olmo-2-7b", 7'298'617'344},
        // Phi-3-mini: 32 * (3072 * (3072 + 2 * 3072) + 3072^2 + 3072 * 2 * 8192 + 8192 * 3072 + 2 * 3072)
        // + 2 * 32064 * 3072 + 3072 (qkv_proj and gate_up_proj fused).
        {"phi-3-mini-4k", 3'821'079'552},
        // Gemma-7B: 28 * (3 * 3072 * 4096 + 4096 * 3072 + 3 * 3072 * 24576 + 2 * 3072) + 256000 * 3072 (tied)
        // + 3072 (q/k/v/o over 16 heads of 256).
        {"gemma-7b", 8'537'680'896},
        // DeepSeek-V3: per block MLA q_a 7168 * 1536 + 1536 + q_b 1536 * 128 * 192 + kv_a 7168 * 576 + 512
        // + kv_b 512 * 128 * 256 + o 16384 * 7168 = 187,107,328, two norms 2 * 7168; 3 dense MLPs
        // 3 * 7168 * 18432; 58 MoE MLPs of 257 experts (256 routed and 1 shared) x 3 * 7168 * 2048 and the
        // router 256 * 7168; embed + lm_head 2 * 129280 * 7168 + 7168: 671,026,404,352, what
        // transformers' DeepseekV3ForCausalLM counts (on the meta device, transformers 4.57).
        {"deepseek-v3", 671'026'404'352}};
    for (auto it = ref.begin(); it != ref.end(); ++it)
        if (it.value().is_number_integer()) expected[it.key()] = it.value().get<int64_t>();

    const auto names = sc::bundledModelNames();
    ASSERT_GE(names.size(), 10u);
    for (const std::string& name : names) {
        SCOPED_TRACE(name);
        auto m = sc::resolveModel(name);
        ASSERT_TRUE(m.ok()) << m.error().message;
        ASSERT_TRUE(expected.count(name)) << "no reference parameter count for bundled model " << name;
        EXPECT_EQ(m->numParams(), expected.at(name));
        EXPECT_EQ(m->name, name);
    }
}

// The CPU-sized models, counted by hand from the transformers layouts.
// tiny-llama (h 256, intermediate 688, 4 layers, 8 heads of 32, 4 kv heads -> kv dim 128, vocab 2048,
// untied): per layer q 256*256 + k 128*256 + v 128*256 + o 256*256 = 196,608, MLP 3*256*688 =
// 528,384, two RMSNorms 2*256 = 512 -> 725,504; 4 layers = 2,902,016; embed + lm_head 2*2048*256 =
// 1,048,576; final norm 256; total 3,950,848.
TEST(ModelImportTest, TinyLlamaHasTheHandCountedParameters) {
    const sc::Model m = load("tiny-llama");
    EXPECT_EQ(m.numParams(), 3'950'848);
    EXPECT_EQ(m.blocks.size(), 4u);
    EXPECT_EQ(m.arch.hidden, 256);
    EXPECT_EQ(m.arch.kv_heads, 4);
    EXPECT_EQ(m.arch.head_dim, 32);
    EXPECT_FALSE(m.arch.tied_embeddings);
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{128, 256}));
    EXPECT_EQ(shapeOf(m, "model.layers.3.mlp.down_proj.weight"), (std::vector<int64_t>{256, 688}));
    EXPECT_EQ(shapeOf(m, "lm_head.weight"), (std::vector<int64_t>{2048, 256}));
}

// tiny-gpt2 (n_embd 256, 4 layers, vocab 2048, 1024 positions, tied head): per layer ln_1 512 +
// c_attn 256*768 + 768 + attn.c_proj 256*256 + 256 + ln_2 512 + c_fc 256*1024 + 1024 + mlp.c_proj
// 1024*256 + 256 = 789,760; 4 layers = 3,159,040; wte 2048*256 + wpe 1024*256 = 786,432; ln_f 512;
// total 3,945,984.
TEST(ModelImportTest, TinyGpt2HasTheHandCountedParameters) {
    const sc::Model m = load("tiny-gpt2");
    EXPECT_EQ(m.numParams(), 3'945'984);
    EXPECT_EQ(m.blocks.size(), 4u);
    EXPECT_TRUE(m.arch.tied_embeddings);
    EXPECT_EQ(shapeOf(m, "transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{256, 768}));
    EXPECT_EQ(shapeOf(m, "transformer.wpe.weight"), (std::vector<int64_t>{1024, 256}));
}

TEST(ModelImportTest, LlamaGqaShapesAndNamedParametersOrder) {
    const sc::Model m = load("llama-3.1-8b");
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 4096}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 4096}));
    EXPECT_EQ(shapeOf(m, "model.layers.31.self_attn.v_proj.weight"), (std::vector<int64_t>{1024, 4096}));
    EXPECT_EQ(shapeOf(m, "model.layers.5.mlp.down_proj.weight"), (std::vector<int64_t>{4096, 14336}));
    EXPECT_EQ(shapeOf(m, "lm_head.weight"), (std::vector<int64_t>{128256, 4096}));
    EXPECT_EQ(findParam(m, "model.layers.0.self_attn.q_proj.bias"), nullptr);

    // named_parameters() order: registration order of LlamaModel / LlamaDecoderLayer.
    const std::vector<std::string> first = {
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.1.self_attn.q_proj.weight",
    };
    ASSERT_EQ(m.params.size(), 1 + 32 * 9 + 2u);
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(m.params[i].name, first[i]);
    EXPECT_EQ(m.params[m.params.size() - 2].name, "model.norm.weight");
    EXPECT_EQ(m.params.back().name, "lm_head.weight");

    EXPECT_EQ(m.arch.hidden, 4096);
    EXPECT_EQ(m.arch.kv_heads, 8);
    EXPECT_EQ(m.arch.head_dim, 128);
    EXPECT_FALSE(m.arch.tied_embeddings);
    ASSERT_EQ(m.buffers.size(), 1u);
    EXPECT_EQ(m.buffers[0].name, "model.rotary_emb.inv_freq");
    EXPECT_EQ(m.buffers[0].numel, 64);
}

TEST(ModelImportTest, ModuleTreeHasEveryIntermediateModuleParentsFirst) {
    const sc::Model m = load("llama-2-7b");
    ASSERT_FALSE(m.modules.empty());
    EXPECT_EQ(m.modules[0].name, "");
    EXPECT_EQ(m.modules[0].parent, -1);
    for (size_t i = 1; i < m.modules.size(); ++i) {
        const sc::Module& mod = m.modules[i];
        ASSERT_GE(mod.parent, 0);
        ASSERT_LT(static_cast<size_t>(mod.parent), i) << mod.name;
        const size_t dot = mod.name.rfind('.');
        const std::string expected_parent = dot == std::string::npos ? "" : mod.name.substr(0, dot);
        EXPECT_EQ(m.modules[static_cast<size_t>(mod.parent)].name, expected_parent) << mod.name;
    }
    const int32_t layers = m.findModule("model.layers");
    ASSERT_GE(layers, 0);
    EXPECT_TRUE(m.modules[static_cast<size_t>(layers)].is_container);
    ASSERT_EQ(m.blocks.size(), 32u);
    for (size_t i = 0; i < m.blocks.size(); ++i) {
        const sc::Module& blk = m.modules[static_cast<size_t>(m.blocks[i])];
        EXPECT_EQ(blk.name, "model.layers." + std::to_string(i));
        EXPECT_TRUE(blk.is_block);
    }
    const int32_t q = m.findModule("model.layers.3.self_attn.q_proj");
    ASSERT_GE(q, 0);
    EXPECT_TRUE(m.isWithin(q, m.blocks[3]));
    EXPECT_FALSE(m.isWithin(q, m.blocks[2]));
    EXPECT_TRUE(m.isWithin(q, 0));
    EXPECT_EQ(m.findModule("model.layers.32"), -1);
    // Every parameter belongs to the module its name says.
    for (const sc::Param& p : m.params)
        EXPECT_EQ(m.modules[static_cast<size_t>(p.module)].name + "." + p.name.substr(p.name.rfind('.') + 1), p.name);
}

TEST(ModelImportTest, Gpt2KeepsConv1DShapesAndTiesTheHead) {
    const sc::Model m = load("gpt2");
    EXPECT_EQ(shapeOf(m, "transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{768, 2304}));
    EXPECT_EQ(shapeOf(m, "transformer.h.0.attn.c_attn.bias"), (std::vector<int64_t>{2304}));
    EXPECT_EQ(shapeOf(m, "transformer.h.11.mlp.c_proj.weight"), (std::vector<int64_t>{3072, 768}));
    EXPECT_EQ(shapeOf(m, "transformer.wpe.weight"), (std::vector<int64_t>{1024, 768}));
    EXPECT_EQ(m.params.front().name, "transformer.wte.weight");
    EXPECT_EQ(m.params.back().name, "transformer.ln_f.bias");
    EXPECT_EQ(findParam(m, "lm_head.weight"), nullptr);
    EXPECT_GE(m.findModule("lm_head"), 0);  // the module exists, its weight is wte's
    EXPECT_TRUE(m.arch.tied_embeddings);
    // transformers 4.x's attn.bias (bool causal mask) and attn.masked_bias per layer; 5.x has neither.
    ASSERT_EQ(m.buffers.size(), 24u);
    EXPECT_EQ(m.buffers[0].name, "transformer.h.0.attn.bias");
    EXPECT_EQ(m.buffers[0].numel, 1024 * 1024);
    EXPECT_EQ(m.buffers[0].dtype, sc::DType::U8);
    EXPECT_EQ(m.buffers[1].name, "transformer.h.0.attn.masked_bias");
    for (const sc::BufferSpec& b : m.buffers) EXPECT_TRUE(b.transformers4_only) << b.name;
    // Conv1D shards its [in, out] weight on dim 0 (in).
    EXPECT_EQ(findParam(m, "transformer.h.0.attn.c_attn.weight")->dim0(), 768);
    EXPECT_EQ(findParam(m, "transformer.h.0.attn.c_attn.weight")->rowNumel(), 2304);
}

TEST(ModelImportTest, MixtralExpertsAreNamedLikeTransformers) {
    const sc::Model m = load("mixtral-8x7b");
    EXPECT_EQ(shapeOf(m, "model.layers.0.block_sparse_moe.gate.weight"), (std::vector<int64_t>{8, 4096}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.block_sparse_moe.experts.0.w1.weight"),
              (std::vector<int64_t>{14336, 4096}));
    EXPECT_EQ(shapeOf(m, "model.layers.31.block_sparse_moe.experts.7.w2.weight"),
              (std::vector<int64_t>{4096, 14336}));
    EXPECT_EQ(shapeOf(m, "model.layers.31.block_sparse_moe.experts.7.w3.weight"),
              (std::vector<int64_t>{14336, 4096}));
    EXPECT_EQ(findParam(m, "model.layers.0.block_sparse_moe.experts.8.w1.weight"), nullptr);
    const int32_t experts = m.findModule("model.layers.0.block_sparse_moe.experts");
    ASSERT_GE(experts, 0);
    EXPECT_TRUE(m.modules[static_cast<size_t>(experts)].is_container);
    EXPECT_EQ(m.arch.experts, 8);
    EXPECT_EQ(m.arch.experts_per_token, 2);
}

TEST(ModelImportTest, Qwen2HasQkvBiasButNoOutputBias) {
    const sc::Model m = load("qwen2-7b");
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.q_proj.bias"), (std::vector<int64_t>{3584}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.k_proj.bias"), (std::vector<int64_t>{512}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.v_proj.bias"), (std::vector<int64_t>{512}));
    EXPECT_EQ(findParam(m, "model.layers.0.self_attn.o_proj.bias"), nullptr);
    EXPECT_EQ(findParam(m, "model.layers.0.mlp.gate_proj.bias"), nullptr);
    EXPECT_EQ(shapeOf(m, "lm_head.weight"), (std::vector<int64_t>{152064, 3584}));
}

// Qwen3: no q/k/v bias; q_norm and k_norm (one head_dim weight each) normalise every head of q and
// k after their projections, before RoPE. Eager RMSNorm keeps the fp32 input with one rsqrt per
// head (qd + heads per token), and for the weight's gradient the bf16 cast (qd); k and v read q's
// input, saved once.
TEST(ModelImportTest, Qwen3NormalisesEachHeadOfQAndK) {
    const sc::Model m = load("qwen3-8b");
    EXPECT_EQ(findParam(m, "model.layers.0.self_attn.q_proj.bias"), nullptr);
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{128}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.k_norm.weight"), (std::vector<int64_t>{128}));
    const int32_t q_norm = m.findModule("model.layers.0.self_attn.q_norm");
    const int32_t k_norm = m.findModule("model.layers.0.self_attn.k_norm");
    std::vector<std::string> names;
    const sc::Op* eager_q = nullptr;
    const sc::Op* eager_k = nullptr;
    size_t q_at = 0;
    for (size_t i = 0; i < m.ops.size(); ++i) {
        const sc::Op& op = m.ops[i];
        if (m.modules[static_cast<size_t>(op.module)].name.rfind("model.layers.0.self_attn", 0) != 0) continue;
        if (op.name == "q_proj") q_at = i;
        if (op.name == "k_proj" || op.name == "v_proj") {
            EXPECT_EQ(i - static_cast<size_t>(op.same_input_back), q_at);
        }
        if (op.module == q_norm && op.kernel_variants == sc::variant::kEagerKernels) eager_q = &op;
        if (op.module == k_norm && op.kernel_variants == sc::variant::kEagerKernels) eager_k = &op;
        if (op.kernel_variants != sc::variant::kFusedKernels) names.push_back(op.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"q_proj", "rms_norm", "k_proj", "rms_norm", "v_proj", "rope", "attn.core",
                                               "attn.qkv", "attn.scores", "attn.softmax", "attn.pv", "o_proj"}));
    ASSERT_TRUE(eager_q && eager_k);
    EXPECT_EQ(eager_q->saved_f32.per_token, 4096 + 32);
    EXPECT_EQ(eager_q->wgrad_saved_act.per_token, 4096);
    EXPECT_EQ(eager_k->saved_f32.per_token, 1024 + 8);
}

// Phi-3: fused qkv_proj [3 x 3072, 3072] and gate_up_proj [2 x 8192, 3072]. SDPA keeps v, a view of
// qkv's output, so q's and k's parts stay too (qkv.kept), and its own output besides o_proj's copy
// (attn.out, flash only); act keeps gate_up's whole output through its gate view.
TEST(ModelImportTest, Phi3FusesQkvAndGateUpAndKeepsTheirWholeOutputs) {
    const sc::Model m = load("phi-3-mini-4k");
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.qkv_proj.weight"), (std::vector<int64_t>{9216, 3072}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.mlp.gate_up_proj.weight"), (std::vector<int64_t>{16384, 3072}));
    EXPECT_EQ(findParam(m, "model.layers.0.self_attn.q_proj.weight"), nullptr);
    double kept = -1, out = -1, act = -1;
    uint8_t out_variants = 0;
    for (const sc::Op& op : m.ops) {
        if (m.modules[static_cast<size_t>(op.module)].name.rfind("model.layers.0.", 0) != 0) continue;
        if (op.name == "qkv.kept") kept = op.saved_act.per_token;
        if (op.name == "attn.out") {
            out = op.saved_act.per_token;
            out_variants = op.attention_variants;
        }
        if (op.name == "act_fn") act = op.saved_act.per_token;
    }
    EXPECT_EQ(kept, 3072 + 3072);
    EXPECT_EQ(out, 3072);
    EXPECT_EQ(out_variants, sc::variant::kFlash);
    EXPECT_EQ(act, 2 * 8192);
    EXPECT_TRUE(m.tp_plan.empty());  // no TP plan for the fused projections
}

TEST(ModelImportTest, Gemma2HasExplicitHeadDimFourNormsAndTiedHead) {
    const sc::Model m = load("gemma-2-9b");
    // head_dim 256 * 16 heads = 4096 != hidden 3584.
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 3584}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{2048, 3584}));
    EXPECT_EQ(shapeOf(m, "model.layers.0.self_attn.o_proj.weight"), (std::vector<int64_t>{3584, 4096}));
    for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                             "post_feedforward_layernorm"})
        EXPECT_EQ(shapeOf(m, std::string("model.layers.41.") + norm + ".weight"), (std::vector<int64_t>{3584}));
    EXPECT_EQ(findParam(m, "lm_head.weight"), nullptr);
    EXPECT_TRUE(m.arch.tied_embeddings);
    EXPECT_EQ(m.buffers.at(0).numel, 128);
}

TEST(ModelImportTest, PythiaUsesGptNeoxNamesAndPartialRotary) {
    const sc::Model m = load("pythia-160m");
    EXPECT_EQ(shapeOf(m, "gpt_neox.layers.0.attention.query_key_value.weight"), (std::vector<int64_t>{2304, 768}));
    EXPECT_EQ(shapeOf(m, "gpt_neox.layers.0.attention.query_key_value.bias"), (std::vector<int64_t>{2304}));
    EXPECT_EQ(shapeOf(m, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight"), (std::vector<int64_t>{3072, 768}));
    EXPECT_EQ(shapeOf(m, "embed_out.weight"), (std::vector<int64_t>{50304, 768}));
    EXPECT_EQ(m.params[1].name, "gpt_neox.layers.0.input_layernorm.weight");
    EXPECT_EQ(m.params.back().name, "embed_out.weight");
    // rotary_ndims = head_dim 64 * rotary_pct 0.25 = 16 -> 8 inverse frequencies.
    ASSERT_EQ(m.buffers.size(), 1u);
    EXPECT_EQ(m.buffers[0].name, "gpt_neox.rotary_emb.inv_freq");
    EXPECT_EQ(m.buffers[0].numel, 8);
}

TEST(ModelImportTest, ModelFlopsPerTokenFollowsTorchtitan) {
    const sc::Model m = load("llama-3.1-8b");
    // torchtitan (torchtitan/models/utils.py get_dense_model_nparams_and_flops; train.py's
    // get_num_flop_per_token(get_num_params(model, exclude_embedding=True), ...)):
    // 6 * (N - embedding) + 12 * L * H * Q * T. N = 8,030,261,248 (reference-cases.json), the
    // embedding 128256 x 4096 = 525,336,576, so 6 * 7,504,924,672 = 45,029,548,032, and
    // 12 * 32 * 32 * 128 * 8192 = 12,884,901,888: 57,914,449,920 FLOPs per token at seq 8192.
    EXPECT_EQ(m.numEmbeddingParams(), 525336576);
    EXPECT_DOUBLE_EQ(m.modelFlopsPerToken(8192), 57914449920.0);
}

TEST(ModelImportTest, MalformedJsonNamesFileLineAndColumn) {
    const auto path = writeTemp("bad.json", "{\n  \"model_type\": \"llama\",\n  hidden_size: 5\n}\n");
    const std::string e = errorOf(path);
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
    EXPECT_NE(e.find("malformed JSON at line 3, column 3"), std::string::npos) << e;
}

TEST(ModelImportTest, TruncatedJsonIsAnError) {
    const auto path = writeTemp("truncated.json", "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 40");
    const std::string e = errorOf(path);
    EXPECT_NE(e.find("truncated.json: malformed JSON at line 3"), std::string::npos) << e;
}

TEST(ModelImportTest, MissingFileSaysCannotOpen) {
    auto r = sc::readJsonFile("/nonexistent/dir/x.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "cannot open '/nonexistent/dir/x.json': No such file or directory");
}

TEST(ModelImportTest, UnknownModelTypeListsSupportedTypes) {
    const auto path = writeTemp("bert.json", R"({"model_type": "bert", "hidden_size": 768})");
    const std::string e = errorOf(path);
    EXPECT_NE(e.find("bert.json: unknown model_type 'bert'; supported: llama, mistral, mixtral, qwen2, qwen3, gemma, gemma2, olmo2, phi3, deepseek_v3, "
                     "gpt2, gpt_neox"),
              std::string::npos)
        << e;
}

TEST(ModelImportTest, MissingOrInvalidFieldNamesFileAndField) {
    json cfg = json::parse(std::ifstream(kModels / "llama-3.1-8b.json"));
    cfg.erase("num_attention_heads");
    auto path = writeTemp("noheads.json", cfg.dump());
    std::string e = errorOf(path);
    EXPECT_NE(e.find("noheads.json: field 'num_attention_heads' is missing"), std::string::npos) << e;

    cfg["num_attention_heads"] = -4;
    path = writeTemp("negheads.json", cfg.dump());
    e = errorOf(path);
    EXPECT_NE(e.find("negheads.json: field 'num_attention_heads' must be a positive integer"), std::string::npos)
        << e;

    cfg["num_attention_heads"] = 32;
    cfg["num_key_value_heads"] = 5;
    path = writeTemp("kv.json", cfg.dump());
    e = errorOf(path);
    EXPECT_NE(e.find("kv.json: field 'num_key_value_heads' (5) must divide"), std::string::npos) << e;

    json no_type = cfg;
    no_type.erase("model_type");
    path = writeTemp("notype.json", no_type.dump());
    e = errorOf(path);
    EXPECT_NE(e.find("notype.json: field 'model_type' is missing"), std::string::npos) << e;

    json gpt2 = json::parse(std::ifstream(kModels / "gpt2.json"));
    gpt2["attn_pdrop"] = 1.5;
    path = writeTemp("gpt2drop.json", gpt2.dump());
    e = errorOf(path);
    EXPECT_NE(e.find("gpt2drop.json: field 'attn_pdrop' must be a probability"), std::string::npos) << e;
}

TEST(ModelImportTest, ResolveModelAcceptsBundledNamesAndPathsAndListsNames) {
    auto by_name = sc::resolveModel("gpt2");
    ASSERT_TRUE(by_name.ok()) << by_name.error().message;
    auto by_path = sc::resolveModel((kModels / "gpt2.json").string());
    ASSERT_TRUE(by_path.ok()) << by_path.error().message;
    EXPECT_EQ(by_name->numParams(), by_path->numParams());

    auto missing = sc::resolveModel("llama-9");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("unknown model 'llama-9'"), std::string::npos);
    EXPECT_NE(missing.error().message.find("llama-3.1-8b"), std::string::npos) << missing.error().message;
}

TEST(ModelImportTest, BundledModelsDirHonoursTheEnvironment) {
    const auto dir = writeTemp("only.json", "{}").parent_path();
    ::setenv("SHARDCAST_MODELS_DIR", dir.c_str(), 1);
    EXPECT_EQ(sc::bundledModelsDir(), dir);
    const auto names = sc::bundledModelNames();
    ::unsetenv("SHARDCAST_MODELS_DIR");
    EXPECT_NE(std::find(names.begin(), names.end(), "only"), names.end());
    EXPECT_EQ(std::find(names.begin(), names.end(), "gpt2"), names.end());
}

// DeepSeek-V3's layout as transformers registers it (DeepseekV3Attention, DeepseekV3MoE): the
// parameters of an MoE block in named_parameters() order, the dense blocks first.
TEST(ModelImportTest, DeepseekV3HasTransformersLayout) {
    const sc::Model m = load("deepseek-v3");
    EXPECT_EQ(m.blocks.size(), 61u);
    EXPECT_EQ(m.arch.experts, 256);
    EXPECT_EQ(m.arch.experts_per_token, 8);
    EXPECT_EQ(shapeOf(m, "model.layers.0.mlp.gate_proj.weight"), (std::vector<int64_t>{18432, 7168}));
    EXPECT_EQ(findParam(m, "model.layers.3.mlp.gate_proj.weight"), nullptr);  // block 3 is MoE
    std::vector<std::string> names;
    for (const sc::Param& p : m.params) {
        if (p.name.rfind("model.layers.3.", 0) == 0 && p.name.find(".experts.") == std::string::npos) names.push_back(p.name);
    }
    const std::vector<std::string> expected = {
        "model.layers.3.self_attn.q_a_proj.weight",           "model.layers.3.self_attn.q_a_layernorm.weight",
        "model.layers.3.self_attn.q_b_proj.weight",           "model.layers.3.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.3.self_attn.kv_a_layernorm.weight",     "model.layers.3.self_attn.kv_b_proj.weight",
        "model.layers.3.self_attn.o_proj.weight",             "model.layers.3.mlp.gate.weight",
        "model.layers.3.mlp.shared_experts.gate_proj.weight", "model.layers.3.mlp.shared_experts.up_proj.weight",
        "model.layers.3.mlp.shared_experts.down_proj.weight", "model.layers.3.input_layernorm.weight",
        "model.layers.3.post_attention_layernorm.weight"};
    EXPECT_EQ(names, expected);
    EXPECT_EQ(shapeOf(m, "model.layers.3.self_attn.q_b_proj.weight"), (std::vector<int64_t>{128 * 192, 1536}));
    EXPECT_EQ(shapeOf(m, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight"), (std::vector<int64_t>{512 + 64, 7168}));
    EXPECT_EQ(shapeOf(m, "model.layers.3.self_attn.kv_b_proj.weight"), (std::vector<int64_t>{128 * 256, 512}));
    EXPECT_EQ(shapeOf(m, "model.layers.60.mlp.experts.255.down_proj.weight"), (std::vector<int64_t>{7168, 2048}));
    // The experts come before the router in named_parameters(), as DeepseekV3MoE registers them.
    size_t expert0 = 0, router = 0;
    for (size_t i = 0; i < m.params.size(); ++i) {
        if (m.params[i].name == "model.layers.3.mlp.experts.0.gate_proj.weight") expert0 = i;
        if (m.params[i].name == "model.layers.3.mlp.gate.weight") router = i;
    }
    EXPECT_LT(expert0, router);
}

TEST(ModelImportTest, DeepseekV3OptionsAndBadFields) {
    json cfg = json::parse(std::ifstream(kModels / "deepseek-v3.json"));
    cfg["num_hidden_layers"] = 2;  // first_k_dense_replace 3 > 2: both blocks dense, as in transformers
    cfg["q_lora_rank"] = nullptr;  // no q compression: one q_proj
    auto m = sc::importHfConfig(cfg, "ds", "ds.json");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_NE(findParam(*m, "model.layers.1.mlp.down_proj.weight"), nullptr);
    EXPECT_EQ(shapeOf(*m, "model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{128 * 192, 7168}));
    cfg["num_key_value_heads"] = 8;
    auto bad = sc::importHfConfig(cfg, "ds", "ds.json");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("'num_key_value_heads' (8) must equal 'num_attention_heads' (128)"), std::string::npos)
        << bad.error().message;
    cfg["num_key_value_heads"] = 128;
    cfg["first_k_dense_replace"] = -1;
    auto neg = sc::importHfConfig(cfg, "ds", "ds.json");
    ASSERT_FALSE(neg.ok());
    EXPECT_NE(neg.error().message.find("ds.json: field 'first_k_dense_replace' must be an integer from 0"), std::string::npos)
        << neg.error().message;
}
