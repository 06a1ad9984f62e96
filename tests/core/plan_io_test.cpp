#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sc = shardcast::core;
using nlohmann::json;

namespace {

const std::filesystem::path kSourceDir = SHARDCAST_SOURCE_DIR;
const std::filesystem::path kExamplePlan = kSourceDir / "examples" / "llama-3.1-8b-8xh100.json";

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// A two-block model built by hand, so validatePlan is tested without the model importers.
std::shared_ptr<const sc::Model> tinyModel(bool with_blocks = true) {
    sc::Model m;
    m.name = "tiny";
    auto add = [&](std::string name, int32_t parent, bool block = false) {
        m.modules.push_back(sc::Module{std::move(name), parent, false, block});
        return static_cast<int32_t>(m.modules.size() - 1);
    };
    add("", -1);
    const int32_t model = add("model", 0);
    add("model.embed_tokens", model);
    const int32_t layers = add("model.layers", model);
    m.modules[static_cast<size_t>(layers)].is_container = true;
    for (int i = 0; i < 2; ++i) {
        const int32_t b = add("model.layers." + std::to_string(i), layers, with_blocks);
        add("model.layers." + std::to_string(i) + ".mlp", b);
        if (with_blocks) m.blocks.push_back(b);
    }
    add("lm_head", 0);
    m.params.push_back(sc::Param{"model.embed_tokens.weight", {1000, 64}, 2, std::nullopt});
    return std::make_shared<const sc::Model>(std::move(m));
}

sc::Plan tinyPlan() {
    sc::Plan p;
    p.model = tinyModel();
    p.model_ref = "tiny.json";
    p.cluster.gpu = *sc::findGpuPreset("H100-SXM");
    return p;
}

std::string validationError(const sc::Plan& p) {
    auto mesh = sc::validatePlan(p);
    EXPECT_FALSE(mesh) << "expected a validation error";
    return mesh ? std::string() : mesh.error().message;
}

std::filesystem::path tempDir(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / ("shardcast_plan_io_test_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

void writeFile(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
}

json examplePlanJson() {
    std::ifstream in(kExamplePlan);
    return json::parse(in);
}

sc::Result<sc::Plan> fromJson(const json& j) { return sc::planFromJson(j, "plan.json", kSourceDir / "examples"); }

}  // namespace

TEST(PlanIoTest, StrategyNamesAndAliases) {
    EXPECT_EQ(sc::parseStrategy("FULL_SHARD"), sc::Strategy::FullShard);
    EXPECT_EQ(sc::parseStrategy("full_shard"), sc::Strategy::FullShard);
    EXPECT_EQ(sc::parseStrategy("ddp"), sc::Strategy::NoShard);
    EXPECT_EQ(sc::parseStrategy("DDP"), sc::Strategy::NoShard);
    EXPECT_EQ(sc::parseStrategy("zero2"), sc::Strategy::ShardGradOp);
    EXPECT_EQ(sc::parseStrategy("zero3"), sc::Strategy::FullShard);
    EXPECT_EQ(sc::parseStrategy("hsdp"), sc::Strategy::HybridShard);
    EXPECT_EQ(sc::parseStrategy("hsdp-zero2"), sc::Strategy::HybridShardZero2);
    EXPECT_EQ(sc::parseStrategy("_hybrid_shard_zero2"), sc::Strategy::HybridShardZero2);
    EXPECT_EQ(sc::parseStrategy("hybrid_shard_zero2"), sc::Strategy::HybridShardZero2);
    EXPECT_FALSE(sc::parseStrategy("zero1").has_value());
    EXPECT_FALSE(sc::parseStrategy("").has_value());
    for (auto s : {sc::Strategy::NoShard, sc::Strategy::ShardGradOp, sc::Strategy::FullShard,
                   sc::Strategy::HybridShard, sc::Strategy::HybridShardZero2}) {
        EXPECT_EQ(sc::parseStrategy(sc::strategyName(s)), s);
    }
    EXPECT_EQ(sc::strategyName(sc::Strategy::HybridShardZero2), "_HYBRID_SHARD_ZERO2");
}

TEST(PlanIoTest, ParseWrapPolicyForms) {
    auto whole = sc::parseWrapPolicy("whole", "--wrap");
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->kind, sc::WrapKind::Whole);
    auto block = sc::parseWrapPolicy("Block", "--wrap");
    ASSERT_TRUE(block);
    EXPECT_EQ(block->kind, sc::WrapKind::Block);
    auto every = sc::parseWrapPolicy("every:4", "--wrap");
    ASSERT_TRUE(every);
    EXPECT_EQ(every->kind, sc::WrapKind::EveryK);
    EXPECT_EQ(every->k, 4);
    auto min = sc::parseWrapPolicy("min-params:100000000", "--wrap");
    ASSERT_TRUE(min);
    EXPECT_EQ(min->kind, sc::WrapKind::MinParams);
    EXPECT_EQ(min->min_params, 100000000);
    for (const char* text : {"whole", "block", "every:4", "min-params:100000000"}) {
        auto w = sc::parseWrapPolicy(text, "--wrap");
        ASSERT_TRUE(w);
        EXPECT_EQ(sc::wrapPolicyString(*w), text);
    }
}

TEST(PlanIoTest, ParseWrapPolicyErrorsNameTheFlag) {
    for (const char* text : {"every:0", "every:x", "every:", "min-params:", "min-params:-5", "blocks", "", "modules:"}) {
        auto w = sc::parseWrapPolicy(text, "--wrap");
        ASSERT_FALSE(w) << text;
        EXPECT_TRUE(contains(w.error().message, "--wrap")) << w.error().message;
    }
    auto missing = sc::parseWrapPolicy("modules:/nonexistent/units.txt", "--wrap");
    ASSERT_FALSE(missing);
    EXPECT_TRUE(contains(missing.error().message, "/nonexistent/units.txt")) << missing.error().message;
}

TEST(PlanIoTest, ParseWrapPolicyModuleFile) {
    const auto dir = tempDir("modules");
    const auto file = dir / "units.txt";
    writeFile(file,
              "# one unit per line\n"
              "model.embed_tokens\n"
              "\n"
              "model.layers.0 + model.layers.1   # two blocks, one unit\n"
              "  lm_head\n");
    auto w = sc::parseWrapPolicy("modules:" + file.string(), "--wrap");
    ASSERT_TRUE(w) << w.error().message;
    EXPECT_EQ(w->kind, sc::WrapKind::Modules);
    ASSERT_EQ(w->modules.size(), 3u);
    EXPECT_EQ(w->modules[0], "model.embed_tokens");
    EXPECT_EQ(w->modules[1], "model.layers.0+model.layers.1");
    EXPECT_EQ(w->modules[2], "lm_head");
    EXPECT_EQ(w->modules_file, file.string());
    EXPECT_EQ(sc::wrapPolicyString(*w), "modules:" + file.string());

    writeFile(file, "model.layers.0\nmodel.layers.1++lm_head\n");
    auto bad = sc::parseWrapPolicy("modules:" + file.string(), "--wrap");
    ASSERT_FALSE(bad);
    EXPECT_TRUE(contains(bad.error().message, file.string() + ":2")) << bad.error().message;

    writeFile(file, "# nothing\n\n");
    auto empty = sc::parseWrapPolicy("modules:" + file.string(), "--wrap");
    ASSERT_FALSE(empty);
    EXPECT_TRUE(contains(empty.error().message, "empty")) << empty.error().message;
    std::filesystem::remove_all(dir);
}

TEST(PlanIoTest, ValidateMeshForEachStrategy) {
    sc::Plan p = tinyPlan();
    auto full = sc::validatePlan(p);
    ASSERT_TRUE(full) << full.error().message;
    EXPECT_EQ(full->world_size, 8);
    EXPECT_EQ(full->shard_size, 8);
    EXPECT_EQ(full->replicate_size, 1);

    p.sharding.strategy = sc::Strategy::NoShard;
    auto ddp = sc::validatePlan(p);
    ASSERT_TRUE(ddp);
    EXPECT_EQ(ddp->shard_size, 1);
    EXPECT_EQ(ddp->replicate_size, 8);

    p.cluster.nodes = 2;
    p.sharding.strategy = sc::Strategy::HybridShard;
    auto hsdp = sc::validatePlan(p);
    ASSERT_TRUE(hsdp);
    EXPECT_EQ(hsdp->world_size, 16);
    EXPECT_EQ(hsdp->shard_size, 8);
    EXPECT_EQ(hsdp->replicate_size, 2);

    p.sharding.shard_size = 4;
    auto hsdp4 = sc::validatePlan(p);
    ASSERT_TRUE(hsdp4);
    EXPECT_EQ(hsdp4->shard_size, 4);
    EXPECT_EQ(hsdp4->replicate_size, 4);

    p.sharding.strategy = sc::Strategy::ShardGradOp;
    p.sharding.shard_size = 16;
    auto zero2 = sc::validatePlan(p);
    ASSERT_TRUE(zero2);
    EXPECT_EQ(zero2->shard_size, 16);
    EXPECT_EQ(zero2->replicate_size, 1);
}

TEST(PlanIoTest, ValidationErrorsNameTheField) {
    struct Case {
        const char* field;
        void (*mutate)(sc::Plan&);
    };
    const Case cases[] = {
        {"training.micro_batch", [](sc::Plan& p) { p.training.micro_batch = 0; }},
        {"training.seq_len", [](sc::Plan& p) { p.training.seq_len = -1; }},
        {"training.grad_accum", [](sc::Plan& p) { p.training.grad_accum = 0; }},
        {"training.seq_len", [](sc::Plan& p) { p.training.seq_len = 99'999'999'999; }},
        {"training.micro_batch", [](sc::Plan& p) { p.training.micro_batch = 1'000'000; }},
        {"training.micro_batch x training.seq_len",
         [](sc::Plan& p) {
             p.training.micro_batch = 1024;
             p.training.seq_len = 1 << 20;
         }},
        {"training.grad_accum", [](sc::Plan& p) { p.training.grad_accum = 100'000; }},
        {"cluster.nodes", [](sc::Plan& p) { p.cluster.nodes = 0; }},
        {"cluster.gpus_per_node", [](sc::Plan& p) { p.cluster.gpus_per_node = 0; }},
        {"sharding.shard_size", [](sc::Plan& p) { p.sharding.shard_size = 4; }},  // FULL_SHARD over 8
        {"sharding.fsdp", [](sc::Plan& p) { p.sharding.fsdp_version = 3; }},
        {"sharding.reshard_after_forward",
         [](sc::Plan& p) {
             p.sharding.reshard_after_forward = sc::ReshardMode::Count;
             p.sharding.reshard_after_forward_k = 3;
         }},
        {"sharding.reshard_after_forward",
         [](sc::Plan& p) {
             p.sharding.reshard_after_forward = sc::ReshardMode::Count;
             p.sharding.reshard_after_forward_k = 0;
         }},
        {"sharding.reshard_after_forward",
         [](sc::Plan& p) {
             p.sharding.fsdp_version = 1;
             p.sharding.reshard_after_forward = sc::ReshardMode::Count;
             p.sharding.reshard_after_forward_k = 2;
         }},
        {"sharding.wrap",
         [](sc::Plan& p) {
             p.sharding.wrap.kind = sc::WrapKind::EveryK;
             p.sharding.wrap.k = 0;
         }},
        {"model.layers.7",
         [](sc::Plan& p) {
             p.sharding.wrap.kind = sc::WrapKind::Modules;
             p.sharding.wrap.modules = {"model.layers.0", "model.layers.7"};
         }},
        {"training.frozen", [](sc::Plan& p) { p.training.frozen_regex = "layers.(0|1"; }},
        {"training.offload",
         [](sc::Plan& p) {
             p.training.offload = sc::Offload::Cpu;
             p.sharding.strategy = sc::Strategy::NoShard;
         }},
        {"training.param_dtype", [](sc::Plan& p) { p.training.param_dtype = sc::DType::F8; }},
        {"min-params", [](sc::Plan& p) { p.model = tinyModel(false); }},
        {"min-params",
         [](sc::Plan& p) {
             p.model = tinyModel(false);
             p.sharding.wrap.kind = sc::WrapKind::EveryK;
             p.sharding.wrap.k = 2;
         }},
    };
    for (const auto& c : cases) {
        sc::Plan p = tinyPlan();
        c.mutate(p);
        const std::string message = validationError(p);
        EXPECT_TRUE(contains(message, c.field)) << "expected '" << c.field << "' in: " << message;
    }
}

TEST(PlanIoTest, ValidationMessagesSayWhatIsValid) {
    sc::Plan p = tinyPlan();
    p.cluster.nodes = 2;
    p.sharding.strategy = sc::Strategy::HybridShard;
    p.sharding.shard_size = 3;
    EXPECT_TRUE(contains(validationError(p),
                         "world size 16 is not divisible by shard_size 3; valid shard sizes: 1, 2, 4, 8, 16"));

    sc::Plan full = tinyPlan();
    full.sharding.shard_size = 4;
    EXPECT_TRUE(contains(validationError(full), "HYBRID_SHARD"));

    sc::Plan mods = tinyPlan();
    mods.sharding.wrap.kind = sc::WrapKind::Modules;
    mods.sharding.wrap.modules = {"model.layer.1"};
    const std::string message = validationError(mods);
    EXPECT_TRUE(contains(message, "'model.layer.1'")) << message;
    EXPECT_TRUE(contains(message, "model.layers.1")) << message;  // the closest existing name

    sc::Plan ddp = tinyPlan();
    ddp.training.micro_batch = 0;
    EXPECT_EQ(validationError(ddp), "training.micro_batch must be a positive integer (got 0)");
}

TEST(PlanIoTest, ValidationAcceptsEdgeCases) {
    sc::Plan p = tinyPlan();
    p.training.no_sync = true;  // no effect with grad_accum 1, but allowed
    p.training.param_dtype.reset();
    p.training.reduce_dtype.reset();
    p.training.frozen_regex = "^model\\.layers\\.[0-9]+\\.mlp";
    p.sharding.reshard_after_forward = sc::ReshardMode::Count;
    p.sharding.reshard_after_forward_k = 4;
    p.sharding.wrap.kind = sc::WrapKind::Modules;
    p.sharding.wrap.modules = {"model.embed_tokens", "model.layers.0+model.layers.1", "lm_head"};
    auto mesh = sc::validatePlan(p);
    EXPECT_TRUE(mesh) << mesh.error().message;

    sc::Plan no_blocks = tinyPlan();
    no_blocks.model = tinyModel(false);
    no_blocks.sharding.wrap.kind = sc::WrapKind::MinParams;
    no_blocks.sharding.wrap.min_params = 1000;
    EXPECT_TRUE(sc::validatePlan(no_blocks));
}

// The tests below load bundled models through resolveModel (core/model/model_io.cpp).

TEST(PlanIoTest, ExamplePlanLoadsAndValidates) {
    auto plan = sc::loadPlanFile(kExamplePlan);
    ASSERT_TRUE(plan) << plan.error().message;
    EXPECT_EQ(plan->model_ref, "llama-3.1-8b");
    ASSERT_NE(plan->model, nullptr);
    EXPECT_EQ(plan->model->numParams(), 8030261248);  // tests/data/reference-cases.json
    EXPECT_EQ(plan->cluster.gpu.name, "H100-SXM");
    EXPECT_EQ(plan->training.seq_len, 8192);
    EXPECT_EQ(plan->training.param_dtype, sc::DType::BF16);
    EXPECT_EQ(plan->training.reduce_dtype, sc::DType::F32);
    EXPECT_EQ(plan->sharding.strategy, sc::Strategy::FullShard);
    EXPECT_EQ(plan->sharding.wrap.kind, sc::WrapKind::Block);
    auto mesh = sc::validatePlan(*plan);
    ASSERT_TRUE(mesh) << mesh.error().message;
    EXPECT_EQ(mesh->world_size, 8);
    EXPECT_EQ(mesh->shard_size, 8);
    EXPECT_EQ(mesh->replicate_size, 1);
}

TEST(PlanIoTest, HybridTwoNodesShardsInsideANode) {
    json j = examplePlanJson();
    j["cluster"]["nodes"] = 2;
    j["sharding"]["strategy"] = "hsdp";
    auto plan = fromJson(j);
    ASSERT_TRUE(plan) << plan.error().message;
    auto mesh = sc::validatePlan(*plan);
    ASSERT_TRUE(mesh);
    EXPECT_EQ(mesh->world_size, 16);
    EXPECT_EQ(mesh->shard_size, 8);
    EXPECT_EQ(mesh->replicate_size, 2);
}

TEST(PlanIoTest, RoundTripThroughJson) {
    json j = examplePlanJson();
    j["cluster"] = {{"gpu", {{"base", "H100-SXM"}, {"name", "H100-custom"}, {"memory_gib", 94}, {"power_limit_w", 500}}},
                    {"nodes", 2},
                    {"gpus_per_node", 8}};
    j["training"]["grad_accum"] = 4;
    j["training"]["no_sync"] = true;
    j["training"]["param_dtype"] = nullptr;
    j["training"]["optimizer"] = "sgd-momentum";
    j["training"]["ac"] = "op";
    j["training"]["kernels"] = "compile";
    j["training"]["impl"] = "torchtitan";
    j["training"]["offload"] = "cpu";
    j["training"]["frozen"] = "embed_tokens";
    j["sharding"] = {{"strategy", "_HYBRID_SHARD_ZERO2"}, {"shard_size", 4}, {"wrap", "every:2"},
                     {"reshard_after_forward", 2}, {"prefetch_depth", 2}, {"backward_prefetch", "post"},
                     {"forward_prefetch", true}, {"limit_all_gathers", false}};
    auto plan = fromJson(j);
    ASSERT_TRUE(plan) << plan.error().message;

    const json written = sc::planToJson(*plan);
    auto back = fromJson(written);
    ASSERT_TRUE(back) << back.error().message << "\n" << written.dump(2);
    EXPECT_EQ(sc::planToJson(*back), written);
    EXPECT_EQ(back->model_ref, "llama-3.1-8b");
    EXPECT_EQ(back->cluster.gpu.name, "H100-custom");
    EXPECT_EQ(back->cluster.gpu.memory_bytes, 94 * sc::kGiB);
    EXPECT_EQ(back->cluster.nodes, 2);
    EXPECT_EQ(back->training.grad_accum, 4);
    EXPECT_TRUE(back->training.no_sync);
    EXPECT_FALSE(back->training.param_dtype.has_value());
    EXPECT_EQ(back->training.reduce_dtype, sc::DType::F32);
    EXPECT_EQ(back->training.optimizer, sc::Optimizer::SgdMomentum);
    EXPECT_EQ(back->training.ac, sc::Checkpointing::Op);
    EXPECT_EQ(back->training.kernels, sc::KernelImpl::Compile);
    EXPECT_EQ(back->training.impl, sc::ModelImpl::Torchtitan);
    EXPECT_DOUBLE_EQ(back->cluster.gpu.power_limit_w, 500);
    EXPECT_EQ(back->training.offload, sc::Offload::Cpu);
    EXPECT_EQ(back->training.frozen_regex, "embed_tokens");
    EXPECT_EQ(back->sharding.strategy, sc::Strategy::HybridShardZero2);
    EXPECT_EQ(back->sharding.shard_size, 4);
    EXPECT_EQ(back->sharding.wrap.kind, sc::WrapKind::EveryK);
    EXPECT_EQ(back->sharding.wrap.k, 2);
    EXPECT_EQ(back->sharding.reshard_after_forward, sc::ReshardMode::Count);
    EXPECT_EQ(back->sharding.reshard_after_forward_k, 2);
    EXPECT_EQ(back->sharding.prefetch_depth, 2);
    EXPECT_EQ(back->sharding.backward_prefetch, sc::ShardingSpec::BackwardPrefetch::Post);
    EXPECT_TRUE(back->sharding.forward_prefetch);
    EXPECT_FALSE(back->sharding.limit_all_gathers);

    // A preset GPU is written by name; the example round-trips too.
    auto example = sc::loadPlanFile(kExamplePlan);
    ASSERT_TRUE(example);
    const json ex = sc::planToJson(*example);
    EXPECT_EQ(ex["cluster"]["gpu"], "H100-SXM");
    EXPECT_EQ(ex["sharding"]["reshard_after_forward"], "default");
    auto ex_back = fromJson(ex);
    ASSERT_TRUE(ex_back) << ex_back.error().message;
    EXPECT_EQ(sc::planToJson(*ex_back), ex);
}

TEST(PlanIoTest, WrittenPlansCarryAVersionAndNewerOnesAreRefused) {
    auto plan = fromJson(examplePlanJson());
    ASSERT_TRUE(plan) << plan.error().message;
    json written = sc::planToJson(*plan);
    EXPECT_EQ(written["format"], "shardcast-plan");
    EXPECT_EQ(written["version"], sc::kPlanFormatVersion);
    written["version"] = sc::kPlanFormatVersion + 1;
    auto newer = sc::planFromJson(written, "team/plan.json", kSourceDir / "examples");
    ASSERT_FALSE(newer);
    EXPECT_NE(newer.error().message.find("team/plan.json"), std::string::npos) << newer.error().message;
    EXPECT_NE(newer.error().message.find("version 2 is newer"), std::string::npos) << newer.error().message;
    EXPECT_NE(newer.error().message.find("(version 1)"), std::string::npos) << newer.error().message;
    written["format"] = "shardcast-timeline";
    written["version"] = 1;
    EXPECT_FALSE(sc::planFromJson(written, "plan.json", kSourceDir / "examples"));
}

TEST(PlanIoTest, PlanFileErrorsNameFileAndField) {
    struct Case {
        json patch;  // merged into the example plan
        std::string expected;
    };
    const Case cases[] = {
        {{{"training", {{"micro_batch", 0}}}}, "plan.json: training.micro_batch must be a positive integer (got 0)"},
        {{{"sharding", {{"strategy", "foo"}}}},
         "plan.json: sharding.strategy 'foo' is not one of NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD, "
         "_HYBRID_SHARD_ZERO2 (aliases ddp, zero2, zero3, hsdp"},
        {{{"training", {{"seq_len", "8k"}}}}, "plan.json: training.seq_len must be a positive integer"},
        {{{"training", {{"batch", 4}}}}, "plan.json: unknown key 'training.batch'"},
        {{{"training", {{"no_sync", 1}}}}, "plan.json: training.no_sync must be true or false"},
        {{{"training", {{"param_dtype", "fp64"}}}}, "plan.json: training.param_dtype 'fp64' is not one of"},
        {{{"training", {{"param_dtype", "fp8"}}}}, "plan.json: training.param_dtype fp8 is not supported"},
        {{{"training", {{"optimizer", "lion"}}}}, "plan.json: training.optimizer 'lion' is not one of adamw"},
        // "selective" names three different things (torchtitan layer or op SAC, Megatron's core).
        {{{"training", {{"ac", "selective"}}}},
         "plan.json: training.ac 'selective' is not one of none | full | layer:K"},
        {{{"training", {{"ac", "selective"}}}}, "torchtitan's is layer:K or op, Megatron's attn-core"},
        {{{"training", {{"frozen", "("}}}}, "plan.json: training.frozen"},
        {{{"cluster", {{"gpu", "V100"}}}}, "plan.json: cluster.gpu"},
        {{{"cluster", {{"nodes", 0}}}}, "plan.json: cluster.nodes must be a positive integer (got 0)"},
        {{{"cluster", {{"gpus", 8}}}}, "plan.json: unknown key 'cluster.gpus'"},
        {{{"cluster", {{"gpu", {{"base", "H100-SXM"}, {"memory_gb", 80}}}}}}, "memory_gb"},
        {{{"sharding", {{"wrap", "every:0"}}}}, "plan.json: sharding.wrap"},
        {{{"sharding", {{"wrap", 3}}}}, "plan.json: sharding.wrap must be one of"},
        {{{"sharding", {{"reshard_after_forward", "sometimes"}}}}, "plan.json: sharding.reshard_after_forward"},
        {{{"sharding", {{"reshard_after_forward", 3}}}}, "plan.json: sharding.reshard_after_forward 3"},
        {{{"sharding", {{"backward_prefetch", "early"}}}}, "plan.json: sharding.backward_prefetch 'early'"},
        {{{"sharding", {{"shard_size", 4}}}}, "plan.json: sharding.shard_size 4"},
        {{{"sharding", {{"fsdp", 3}}}}, "plan.json: sharding.fsdp"},
        {{{"sharding", {{"wrap", json::array({"model.layers.0", "model.nope"})}}}}, "'model.nope'"},
        {{{"model", "no-such-model"}}, "plan.json: model"},
        {{{"model", 7}}, "plan.json: model must be a string"},
        {{{"extra", true}}, "plan.json: unknown key 'extra'"},
    };
    for (const auto& c : cases) {
        json j = examplePlanJson();
        j.merge_patch(c.patch);
        auto plan = fromJson(j);
        ASSERT_FALSE(plan) << c.patch.dump();
        EXPECT_TRUE(contains(plan.error().message, c.expected))
            << "expected '" << c.expected << "' in: " << plan.error().message;
    }
    json no_model = examplePlanJson();
    no_model.erase("model");
    auto plan = fromJson(no_model);
    ASSERT_FALSE(plan);
    EXPECT_TRUE(contains(plan.error().message, "plan.json: model is required")) << plan.error().message;
}

TEST(PlanIoTest, MalformedOrMissingPlanFileNamesTheFile) {
    const auto dir = tempDir("malformed");
    const auto truncated = dir / "truncated.json";
    writeFile(truncated, R"({"model": "llama-3.1-8b", "cluster": {"nodes": )");
    auto plan = sc::loadPlanFile(truncated);
    ASSERT_FALSE(plan);
    EXPECT_TRUE(contains(plan.error().message, truncated.string())) << plan.error().message;

    const auto array = dir / "array.json";
    writeFile(array, "[1, 2]");
    auto arr = sc::loadPlanFile(array);
    ASSERT_FALSE(arr);
    EXPECT_TRUE(contains(arr.error().message, array.string())) << arr.error().message;

    auto missing = sc::loadPlanFile(dir / "absent.json");
    ASSERT_FALSE(missing);
    EXPECT_TRUE(contains(missing.error().message, (dir / "absent.json").string())) << missing.error().message;
    std::filesystem::remove_all(dir);
}

TEST(PlanIoTest, RelativePathsResolveAgainstThePlanFolder) {
    const auto dir = tempDir("relative");
    writeFile(dir / "units.txt", "model.embed_tokens\nmodel.layers.0+model.layers.1\n");
    writeFile(dir / "gpu.json", R"({"base": "H200", "name": "H200-lab", "network_bytes_per_s": 25e9})");
    json j = examplePlanJson();
    j["cluster"]["gpu"] = "gpu.json";
    j["sharding"]["wrap"] = "modules:units.txt";
    writeFile(dir / "plan.json", j.dump(2));

    auto plan = sc::loadPlanFile(dir / "plan.json");
    ASSERT_TRUE(plan) << plan.error().message;
    EXPECT_EQ(plan->cluster.gpu.name, "H200-lab");
    EXPECT_DOUBLE_EQ(plan->cluster.gpu.network_bytes_per_s, 25e9);
    EXPECT_EQ(plan->sharding.wrap.kind, sc::WrapKind::Modules);
    ASSERT_EQ(plan->sharding.wrap.modules.size(), 2u);
    EXPECT_EQ(plan->sharding.wrap.modules[1], "model.layers.0+model.layers.1");
    EXPECT_EQ(plan->sharding.wrap.modules_file, "units.txt");  // as written, for write-back

    // Written back next to the original, the plan reads the same files again.
    writeFile(dir / "copy.json", sc::planToJson(*plan).dump(2));
    auto copy = sc::loadPlanFile(dir / "copy.json");
    ASSERT_TRUE(copy) << copy.error().message;
    EXPECT_EQ(copy->sharding.wrap.modules, plan->sharding.wrap.modules);

    writeFile(dir / "units.txt", "model.layers.0\nmodel.layers.99\n");
    auto unknown = sc::loadPlanFile(dir / "plan.json");
    ASSERT_FALSE(unknown);
    EXPECT_TRUE(contains(unknown.error().message, "model.layers.99")) << unknown.error().message;
    EXPECT_TRUE(contains(unknown.error().message, "units.txt")) << unknown.error().message;
    std::filesystem::remove_all(dir);
}

namespace {

// A plan on a config file of its own (not a bundled model), scaled, with a modules:FILE policy.
json planOnConfigFile(const std::filesystem::path& dir) {
    std::filesystem::copy_file(kSourceDir / "models" / "llama-3.1-8b.json", dir / "my-llama.json");
    writeFile(dir / "units.txt", "model.embed_tokens\nmodel.layers.0+model.layers.1\n");
    json j = examplePlanJson();
    j["model"] = "my-llama.json";
    j["scale"] = "hidden=512,layers=2";
    j["sharding"]["wrap"] = "modules:units.txt";
    return j;
}

}  // namespace

TEST(PlanIoTest, SelfContainedPlanReadsBackAnywhere) {
    const auto dir = tempDir("self_contained");
    const auto elsewhere = tempDir("self_contained_elsewhere");
    writeFile(dir / "plan.json", planOnConfigFile(dir).dump(2));
    auto plan = sc::loadPlanFile(dir / "plan.json");
    ASSERT_TRUE(plan) << plan.error().message;

    auto self = sc::selfContainedPlanJson(*plan);
    ASSERT_TRUE(self) << self.error().message;
    const json config = json::parse(std::ifstream(kSourceDir / "models" / "llama-3.1-8b.json"));
    EXPECT_EQ(self->at("model"), (json{{"name", "my-llama"}, {"config", config}}));
    EXPECT_EQ(self->at("sharding").at("wrap"), (json{"model.embed_tokens", "model.layers.0+model.layers.1"}));
    EXPECT_EQ(self->at("scale"), "hidden=512,layers=2");

    // The files are gone and the JSON is read in another folder: the same plan.
    std::filesystem::remove_all(dir);
    auto back = sc::planFromJson(json::parse(self->dump()), "stored plan", elsewhere);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(back->model->numParams(), plan->model->numParams());
    EXPECT_EQ(back->model->name, plan->model->name);
    json a = sc::planToJson(*plan), b = sc::planToJson(*back);
    a.erase("model");
    b.erase("model");
    a["sharding"].erase("wrap");
    b["sharding"].erase("wrap");
    EXPECT_EQ(a, b);
    EXPECT_EQ(back->sharding.wrap.modules, plan->sharding.wrap.modules);
    // Self-contained again: the same document (so a store finds it by its hash).
    auto again = sc::selfContainedPlanJson(*back);
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(*again, *self);

    // A bundled model stays by name.
    auto bundled = sc::loadPlanFile(kExamplePlan);
    ASSERT_TRUE(bundled);
    EXPECT_EQ(sc::selfContainedPlanJson(*bundled)->at("model"), "llama-3.1-8b");
    std::filesystem::remove_all(elsewhere);
}

TEST(PlanIoTest, BadEmbeddedModelsNameTheField) {
    const json config = json::parse(std::ifstream(kSourceDir / "models" / "llama-3.1-8b.json"));
    auto error = [&](const json& model) {
        json j = examplePlanJson();
        j["model"] = model;
        auto plan = fromJson(j);
        EXPECT_FALSE(plan) << model.dump().substr(0, 80);
        return plan ? std::string() : plan.error().message;
    };
    EXPECT_TRUE(contains(error({{"config", config}}), "model.name")) << error({{"config", config}});
    EXPECT_TRUE(contains(error({{"name", 3}, {"config", config}}), "model.name"));
    EXPECT_TRUE(contains(error({{"name", "m"}}), "model.config"));
    EXPECT_TRUE(contains(error({{"name", "m"}, {"config", "llama.json"}}), "model.config"));
    const std::string bad_type = error({{"name", "m"}, {"config", {{"model_type", "nope"}}}});
    EXPECT_TRUE(contains(bad_type, "model.config")) << bad_type;
    EXPECT_TRUE(contains(bad_type, "nope")) << bad_type;
    const std::string extra = error({{"name", "m"}, {"config", config}, {"path", "x"}});
    EXPECT_TRUE(contains(extra, "'path'")) << extra;
    EXPECT_TRUE(contains(error(42), "model must be")) << error(42);
    // A module tree is recognised by its "format", as loadModelFile does for a file.
    const std::string tree = error({{"name", "m"}, {"config", {{"format", "shardcast-module-tree/1"}}}});
    EXPECT_TRUE(contains(tree, "model.config")) << tree;
}

namespace {

// The memo skips the micro-batch work bound only for the model, micro-batch, sequence and
// variants it saw pass. Llama-3.1-405B's forward, recompute and backward are about 4 x 2 x 405e9
// = 3.2e12 FLOPs per token, so 128 sequences of 8,192 tokens (1.05e6 tokens, 3.4e18 FLOPs) exceed
// the 2.4e18 bound of docs/limits.md while one sequence (2.7e16) is far inside it.
TEST(PlanIoTest, CheckMemoRechecksTheWorkOfAnotherMicroBatch) {
    auto model = sc::resolveModel("llama-3.1-405b");
    ASSERT_TRUE(model) << model.error().message;
    sc::Plan p;
    p.model = std::make_shared<const sc::Model>(std::move(*model));
    p.cluster.gpu = *sc::findGpuPreset("H100-SXM");
    p.cluster.nodes = 2;
    p.cluster.gpus_per_node = 8;
    p.training.seq_len = 8192;
    p.training.micro_batch = 1;
    sc::PlanCheckMemo memo;
    auto ok = sc::validatePlan(p, &memo);
    ASSERT_TRUE(ok) << ok.error().message;
    EXPECT_EQ(memo.model, p.model);
    EXPECT_EQ(memo.micro_batch, 1);

    p.training.micro_batch = 128;
    auto with_memo = sc::validatePlan(p, &memo);
    auto without = sc::validatePlan(p);
    ASSERT_FALSE(without);
    ASSERT_FALSE(with_memo);
    EXPECT_EQ(with_memo.error().message, without.error().message);
    EXPECT_TRUE(contains(with_memo.error().message, "FLOPs of forward")) << with_memo.error().message;
    EXPECT_EQ(memo.micro_batch, 1);  // a failed check is not remembered

    // The same model at the size that passed: the memo's key matches and the plan validates.
    p.training.micro_batch = 1;
    EXPECT_TRUE(sc::validatePlan(p, &memo));
}

}  // namespace
