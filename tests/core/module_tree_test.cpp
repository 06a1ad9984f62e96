// shardcast's module-tree JSON (docs/module-tree-format.md): loading and strict validation.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model.hpp"
#include "core/model/model_io.hpp"

namespace sc = shardcast::core;
using nlohmann::json;

namespace {

const std::filesystem::path kExample =
    std::filesystem::path(SHARDCAST_SOURCE_DIR) / "examples" / "tiny-mlp-tree.json";

json minimal() {
    return json::parse(R"({
      "format": "shardcast-module-tree/1",
      "name": "mini",
      "modules": [
        {"name": "blocks.0.attn", "params": [{"name": "qkv", "shape": [96, 32]}],
         "ops": [{"name": "core", "kind": "attention", "flops_per_token": 0, "flops_per_token_seq": 128,
                  "bwd_flops_factor": 2.5, "saved_bytes_per_token": 256, "saved_bytes_per_token_seq": 4,
                  "selective_recompute": true}]},
        {"name": "blocks.0", "block": true}
      ]
    })");
}

std::string errorOf(const json& tree) {
    auto m = sc::importModuleTree(tree, "bad", "bad-tree.json");
    EXPECT_FALSE(m.ok()) << "loaded but should not: " << tree.dump();
    return m.ok() ? "" : m.error().message;
}

}  // namespace

TEST(ModuleTreeTest, ExampleFileLoads) {
    auto r = sc::loadModelFile(kExample);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const sc::Model& m = *r;
    EXPECT_EQ(m.name, "tiny-mlp");
    // embed 1000*256 + 2 layers * (512 + 1024*256 + 1024 + 256*1024 + 256) + head 1000*256.
    EXPECT_EQ(m.numParams(), 256'000 + 2 * 526'080 + 256'000);
    ASSERT_EQ(m.blocks.size(), 2u);
    EXPECT_EQ(m.modules[static_cast<size_t>(m.blocks[1])].name, "layers.1");
    EXPECT_TRUE(m.modules[static_cast<size_t>(m.findModule("layers"))].is_container);
    EXPECT_EQ(m.params[1].name, "layers.0.norm.weight");
    EXPECT_EQ(m.params[3].shape, (std::vector<int64_t>{1024, 256}));
    ASSERT_EQ(m.buffers.size(), 1u);
    EXPECT_EQ(m.buffers[0].name, "step");
    EXPECT_EQ(m.buffers[0].dtype, sc::DType::I64);
    ASSERT_EQ(m.ops.size(), 11u);  // embed, 4 per layer, head, loss
    EXPECT_EQ(m.ops.back().name, "loss");
    EXPECT_EQ(m.ops.back().module, 0);
    EXPECT_EQ(m.ops.back().saved_u8.per_token, 4000);
    EXPECT_EQ(m.ops.back().temp_f32.per_token, 2000);  // 8000 bytes as fp32 elements
    EXPECT_EQ(m.ops[2].kind, sc::OpKind::Matmul);
    EXPECT_EQ(m.ops[2].bwd_flops_factor, 2);  // matmul default
    EXPECT_EQ(m.ops[3].bwd_flops_factor, 1);
    EXPECT_TRUE(m.ops[3].selective_recompute);
    EXPECT_EQ(m.arch.layers, 0);
    // 6 * (N - the embedding's 1000 x 256), no s^2 terms (torchtitan's convention).
    EXPECT_EQ(m.numEmbeddingParams(), 256'000);
    EXPECT_DOUBLE_EQ(m.modelFlopsPerToken(4096), 6.0 * (m.numParams() - 256'000));
}

TEST(ModuleTreeTest, ParentsAreImpliedAndPrecedeChildren) {
    auto r = sc::importModuleTree(minimal(), "x", "mini.json");
    ASSERT_TRUE(r.ok()) << r.error().message;
    const sc::Model& m = *r;
    ASSERT_EQ(m.modules.size(), 4u);
    EXPECT_EQ(m.modules[0].name, "");
    EXPECT_EQ(m.modules[1].name, "blocks");
    EXPECT_EQ(m.modules[2].name, "blocks.0");
    EXPECT_EQ(m.modules[3].name, "blocks.0.attn");
    EXPECT_EQ(m.modules[3].parent, 2);
    EXPECT_EQ(m.modules[2].parent, 1);
    EXPECT_TRUE(m.modules[2].is_block);
    EXPECT_EQ(m.blocks, (std::vector<int32_t>{2}));
    EXPECT_EQ(m.name, "mini");  // the tree's own name wins
    EXPECT_EQ(m.params[0].name, "blocks.0.attn.qkv");
    const sc::Op& op = m.ops.at(0);
    EXPECT_EQ(op.kind, sc::OpKind::Attention);
    EXPECT_EQ(op.flops.per_token_seq, 128);
    EXPECT_EQ(op.bwd_flops_factor, 2.5);
    EXPECT_EQ(op.saved_u8.at(2 * 100, 100), 200.0 * (256 + 4 * 100));
    // 6N + 3 * 128 * s per token.
    EXPECT_DOUBLE_EQ(m.modelFlopsPerToken(100), 6.0 * 96 * 32 + 3.0 * 128 * 100);
}

TEST(ModuleTreeTest, RejectsUnknownKeysNamingModuleAndField) {
    json t = minimal();
    t["modules"][1]["wrap"] = true;
    EXPECT_EQ(errorOf(t), "bad-tree.json: modules[1] ('blocks.0'): unknown field 'wrap'; allowed: name, container, "
                          "block, params, buffers, ops");
    t = minimal();
    t["modules"][0]["ops"][0]["saved_bytes"] = 1;
    EXPECT_NE(errorOf(t).find("bad-tree.json: modules[0] ('blocks.0.attn').ops[0]: unknown field 'saved_bytes'"),
              std::string::npos);
    t = minimal();
    t["version"] = 2;
    EXPECT_NE(errorOf(t).find("bad-tree.json: unknown field 'version'"), std::string::npos);
}

TEST(ModuleTreeTest, RejectsNegativeSizesAndMissingFields) {
    json t = minimal();
    t["modules"][0]["params"][0]["shape"] = {96, -32};
    EXPECT_NE(errorOf(t).find("modules[0] ('blocks.0.attn').params[0]: field 'shape' must be an array of positive"),
              std::string::npos);
    t = minimal();
    t["modules"][0]["ops"][0]["saved_bytes_per_token"] = -1;
    EXPECT_NE(errorOf(t).find("ops[0]: field 'saved_bytes_per_token' must be a non-negative number"),
              std::string::npos);
    t = minimal();
    t["modules"][0]["ops"][0].erase("flops_per_token");
    EXPECT_NE(errorOf(t).find("ops[0]: field 'flops_per_token' is missing"), std::string::npos);
    t = minimal();
    t["modules"][0]["buffers"] = json::array({{{"name", "mask"}, {"numel", -5}}});
    EXPECT_NE(errorOf(t).find("buffers[0]: field 'numel' must be a non-negative integer"), std::string::npos);
    t = minimal();
    t["modules"][0]["params"][0]["dtype"] = "fp64";
    EXPECT_NE(errorOf(t).find("params[0]: field 'dtype' must be one of"), std::string::npos);
    t = minimal();
    t["modules"][0]["ops"][0]["kind"] = "conv";
    EXPECT_NE(errorOf(t).find("ops[0]: field 'kind' must be one of matmul"), std::string::npos);
    t = minimal();
    t["format"] = "shardcast-module-tree/2";
    EXPECT_NE(errorOf(t).find("bad-tree.json: field 'format'"), std::string::npos);
}

TEST(ModuleTreeTest, RejectsDuplicates) {
    json t = minimal();
    t["modules"].push_back({{"name", "blocks.0"}});
    EXPECT_NE(errorOf(t).find("modules[2] ('blocks.0'): duplicate module name 'blocks.0'"), std::string::npos);
    t = minimal();
    t["modules"][0]["params"].push_back({{"name", "qkv"}, {"shape", {1}}});
    EXPECT_NE(errorOf(t).find("params[1]: duplicate parameter 'blocks.0.attn.qkv'"), std::string::npos);
    t = minimal();
    t["modules"][0]["ops"].push_back(t["modules"][0]["ops"][0]);
    EXPECT_NE(errorOf(t).find("ops[1]: duplicate op name 'core'"), std::string::npos);
}

TEST(ModuleTreeTest, LoadModelFileDispatchesOnFormat) {
    const auto dir = std::filesystem::temp_directory_path() / "shardcast_module_tree_test";
    std::filesystem::create_directories(dir);
    const auto path = dir / "tree.json";
    json t = minimal();
    t["modules"][0]["params"][0]["shape"] = {96, 0};
    std::ofstream(path) << t.dump(2);
    auto r = sc::loadModelFile(path);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(path.string() + ": modules[0] ('blocks.0.attn').params[0]"), std::string::npos)
        << r.error().message;
}
