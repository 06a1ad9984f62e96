// --scale: a large model shrunk with its shape of units kept (core/model/model_scale.hpp), through
// buildPlan and through a plan file.
#include "core/model/model_scale.hpp"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"

namespace sc = shardcast::core;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

const sc::Param* findParam(const sc::Model& m, const std::string& name) {
    for (const sc::Param& p : m.params)
        if (p.name == name) return &p;
    return nullptr;
}

sc::PlanOverrides overrides(const char* model, const char* scale) {
    sc::PlanOverrides o;
    o.model = model;
    o.scale = scale;
    o.gpus_per_node = 4;
    o.wrap = "block";
    return o;
}

}  // namespace

// llama-3.1-70b: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 kv heads, vocab 128256,
// untied. At hidden=512, layers=4: head_dim 512/64 = 8, kv dim 8*8 = 64, intermediate 28672 * 512 /
// 8192 = 1792. Per layer q 512*512 + k 64*512 + v 64*512 + o 512*512 = 589,824, MLP 3*512*1792 =
// 2,752,512, two norms 1,024 -> 3,343,360; 4 layers 13,373,440; embed + lm_head 2*128256*512 =
// 131,334,144; final norm 512; total 144,708,096.
TEST(ModelScaleTest, Llama70bAtHidden512Layers4KeepsItsShape) {
    auto plan = sc::buildPlan(overrides("llama-3.1-70b", "hidden=512,layers=4"));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const sc::Model& m = *plan->model;
    EXPECT_EQ(m.name, "llama-3.1-70b@hidden=512,layers=4");
    EXPECT_EQ(m.numParams(), 144'708'096);
    EXPECT_EQ(m.blocks.size(), 4u);
    EXPECT_EQ(m.arch.hidden, 512);
    EXPECT_EQ(m.arch.heads, 64);
    EXPECT_EQ(m.arch.kv_heads, 8);  // the GQA ratio 64 / 8 is kept
    EXPECT_EQ(m.arch.head_dim, 8);
    EXPECT_EQ(m.arch.intermediate, 1792);
    EXPECT_EQ(m.arch.vocab, 128256);
    ASSERT_NE(findParam(m, "model.layers.3.self_attn.k_proj.weight"), nullptr);
    EXPECT_EQ(findParam(m, "model.layers.3.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(findParam(m, "model.layers.4.self_attn.k_proj.weight"), nullptr);
    EXPECT_EQ(plan->model_ref, "llama-3.1-70b");
    EXPECT_EQ(sc::scaleString(plan->scale), "hidden=512,layers=4");

    // Block wrapping gives one unit per block plus the root.
    auto mesh = sc::validatePlan(*plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    sc::Program program;
    ASSERT_TRUE(sc::lower(*plan, *mesh, program).ok());
    EXPECT_EQ(program.units.size(), 5u);
}

// layers only: 80 -> 2 blocks of the full width. Per layer of llama-3.1-70b: q, o 8192^2 each, k, v
// 1024*8192 each = 150,994,944; MLP 3*8192*28672 = 704,643,072; norms 16,384 -> 855,654,400; 2 layers
// 1,711,308,800; embed + head 2*128256*8192 = 2,101,346,304; final norm 8,192; total 3,812,663,296.
TEST(ModelScaleTest, LayersAloneKeepsTheWidth) {
    auto plan = sc::buildPlan(overrides("llama-3.1-70b", "layers=2"));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->model->numParams(), 3'812'663'296);
    EXPECT_EQ(plan->model->name, "llama-3.1-70b@layers=2");
}

TEST(ModelScaleTest, SeqSetsTheSequenceLength) {
    auto plan = sc::buildPlan(overrides("tiny-llama", "seq=128"));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->training.seq_len, 128);
    EXPECT_TRUE(plan->scale.empty());
    EXPECT_EQ(plan->model->name, "tiny-llama");
}

// gpt2 (12 heads) at hidden=384: head_dim 32; n_inner is null, so the MLP is 4 * 384 = 1536 wide.
// Per layer ln_1 768 + c_attn 384*1152 + 1152 + attn.c_proj 384*384 + 384 + ln_2 768 + c_fc
// 384*1536 + 1536 + mlp.c_proj 1536*384 + 384 = 1,774,464; 4 layers 7,097,856; wte 50257*384 =
// 19,298,688; wpe 1024*384 = 393,216; ln_f 768; total 26,790,528.
TEST(ModelScaleTest, Gpt2ScalesNEmbdAndNLayer) {
    auto plan = sc::buildPlan(overrides("gpt2", "layers=4,hidden=384"));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->model->numParams(), 26'790'528);
    EXPECT_EQ(plan->model->name, "gpt2@hidden=384,layers=4");
    EXPECT_EQ(plan->model->arch.head_dim, 32);
    // GPT-2 has no rotary embeddings: any multiple of the head count is valid.
    auto odd = sc::buildPlan(overrides("gpt2", "hidden=36"));
    ASSERT_TRUE(odd.ok()) << odd.error().message;
    EXPECT_EQ(odd->model->arch.head_dim, 3);
}

TEST(ModelScaleTest, BadValuesNameTheFlagAndWhatIsValid) {
    struct Case {
        const char* scale;
        const char* expected;
    };
    for (const Case& c : {Case{"width=4", "--scale: unknown key 'width'; valid: hidden, layers, seq"},
                          Case{"hidden=0", "--scale: hidden must be a positive integer"},
                          Case{"layers=x", "--scale: layers must be a positive integer"},
                          Case{"hidden", "--scale: 'hidden' is not KEY=N"},
                          Case{"layers=2,layers=3", "--scale: key 'layers' is given twice"},
                          Case{"hidden=520", "hidden=520 must be a positive multiple of 128 (64 attention heads"}}) {
        SCOPED_TRACE(c.scale);
        auto plan = sc::buildPlan(overrides("llama-3.1-70b", c.scale));
        ASSERT_FALSE(plan.ok());
        EXPECT_TRUE(contains(plan.error().message, c.expected)) << plan.error().message;
        EXPECT_EQ(plan.error().message.rfind("--scale", 0), 0u) << plan.error().message;
    }
    sc::PlanOverrides both = overrides("tiny-llama", "seq=128");
    both.seq_len = 256;
    auto plan = sc::buildPlan(both);
    ASSERT_FALSE(plan.ok());
    EXPECT_TRUE(contains(plan.error().message, "--seq-len")) << plan.error().message;
}

TEST(ModelScaleTest, ModuleTreesCannotBeScaled) {
    const std::string tree = std::string(SHARDCAST_SOURCE_DIR) + "/examples/tiny-mlp-tree.json";
    auto plan = sc::buildPlan(overrides(tree.c_str(), "layers=2"));
    ASSERT_FALSE(plan.ok());
    EXPECT_TRUE(contains(plan.error().message, "module-tree model cannot be scaled")) << plan.error().message;
}

TEST(ModelScaleTest, PlanFileCarriesTheScaleAndReadsBackScaled) {
    auto plan = sc::buildPlan(overrides("llama-3.1-70b", "hidden=512,layers=4,seq=256"));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const nlohmann::json j = sc::planToJson(*plan);
    EXPECT_EQ(j.at("model"), "llama-3.1-70b");
    EXPECT_EQ(j.at("scale"), "hidden=512,layers=4");
    EXPECT_EQ(j.at("training").at("seq_len"), 256);
    auto back = sc::planFromJson(j, "scaled.json", {});
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->model->name, "llama-3.1-70b@hidden=512,layers=4");
    EXPECT_EQ(back->model->numParams(), 144'708'096);
    EXPECT_EQ(sc::planToJson(*back), j);

    // A plan file's scale is overridden key by key by --scale, starting again from the config.
    const auto path = std::filesystem::temp_directory_path() / "shardcast_model_scale_test.plan.json";
    ASSERT_TRUE(sc::writePlanFile(*plan, path).ok());
    sc::PlanOverrides o;
    o.plan_file = path.string();
    o.scale = "layers=2";
    auto rescaled = sc::buildPlan(o);
    ASSERT_TRUE(rescaled.ok()) << rescaled.error().message;
    EXPECT_EQ(rescaled->model->name, "llama-3.1-70b@hidden=512,layers=2");
    EXPECT_EQ(rescaled->model->blocks.size(), 2u);

    // --model replaces the model and drops the file's scale.
    sc::PlanOverrides other;
    other.plan_file = path.string();
    other.model = "tiny-llama";
    auto replaced = sc::buildPlan(other);
    ASSERT_TRUE(replaced.ok()) << replaced.error().message;
    EXPECT_EQ(replaced->model->name, "tiny-llama");
    EXPECT_TRUE(replaced->scale.empty());
    EXPECT_FALSE(sc::planToJson(*replaced).contains("scale"));

    nlohmann::json bad = j;
    bad["scale"] = "seq=4";
    auto refused = sc::planFromJson(bad, "bad.json", {});
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(contains(refused.error().message, "bad.json: scale: seq")) << refused.error().message;
}

// Every bundled config scales (each model_type's size keys are known): at hidden = 8 x twice the head
// count (a valid width for rotary and non-rotary models alike) and 2 layers, the model has exactly
// that width, 2 blocks, its head counts and vocabulary, and fewer parameters than before.
TEST(ModelScaleTest, EveryBundledConfigScales) {
    for (const std::string& name : sc::bundledModelNames()) {
        SCOPED_TRACE(name);
        auto base = sc::resolveModel(name);
        ASSERT_TRUE(base.ok()) << base.error().message;
        if (base->arch.model_type == "deepseek_v3") {
            // Layers only: its latent and head sizes are not shares of hidden.
            sc::ModelScale width;
            width.hidden = 16 * base->arch.heads;
            auto refused = sc::scaleModel(*base, width);
            ASSERT_FALSE(refused.ok());
            EXPECT_NE(refused.error().message.find("scales by layers only"), std::string::npos) << refused.error().message;
            sc::ModelScale depth;
            depth.layers = 4;
            auto scaled = sc::scaleModel(*base, depth);
            ASSERT_TRUE(scaled.ok()) << scaled.error().message;
            EXPECT_EQ(scaled->blocks.size(), 4u);
            // Three dense blocks (first_k_dense_replace) and one MoE block of 256 routed experts
            // and a shared one: 3 x 583,483,392 + 11,507,286,016 + embed, head and norm 1,853,365,248.
            EXPECT_EQ(scaled->numParams(), 3 * int64_t{583'483'392} + 11'507'286'016 + 1'853'365'248);
            continue;
        }
        const int64_t hidden = 16 * base->arch.heads;
        sc::ModelScale scale;
        scale.hidden = hidden;
        scale.layers = 2;
        auto scaled = sc::scaleModel(*base, scale);
        ASSERT_TRUE(scaled.ok()) << scaled.error().message;
        EXPECT_EQ(scaled->name, name + "@" + sc::scaleString(scale));
        EXPECT_EQ(scaled->arch.hidden, hidden);
        EXPECT_EQ(scaled->arch.head_dim, 16);
        EXPECT_EQ(scaled->blocks.size(), 2u);
        EXPECT_EQ(scaled->arch.heads, base->arch.heads);
        EXPECT_EQ(scaled->arch.kv_heads, base->arch.kv_heads);
        EXPECT_EQ(scaled->arch.vocab, base->arch.vocab);
        EXPECT_LT(scaled->numParams(), base->numParams());
    }
}
