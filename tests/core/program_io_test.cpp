// The Program's JSON document: a Program written by one process and read by another compares
// equal; a newer format version is refused; bad input is an error naming the field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program_io.hpp"
#include "lowered_program.hpp"

using namespace shardcast::core;
using nlohmann::json;

namespace {

Plan makePlan(const char* model_name, Strategy strategy, int nodes, int gpus_per_node) {
    auto model = resolveModel(model_name);
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = gpus_per_node;
    plan.training.seq_len = 2048;
    plan.sharding.strategy = strategy;
    return plan;
}

using shardcast::core::testing::lowered;

// Programs that between them use every task kind, stream, process group kind and op kind.
std::vector<std::pair<std::string, Program>> samplePrograms() {
    std::vector<std::pair<std::string, Program>> out;
    out.emplace_back("llama-3.1-8b FULL_SHARD 8 GPUs", lowered(makePlan("llama-3.1-8b", Strategy::FullShard, 1, 8)));
    Plan hsdp = makePlan("pythia-160m", Strategy::HybridShard, 2, 4);
    hsdp.sharding.reshard_after_forward = ReshardMode::Count;
    hsdp.sharding.reshard_after_forward_k = 2;
    hsdp.training.grad_accum = 2;
    hsdp.training.no_sync = true;
    hsdp.training.ac = Checkpointing::AttnCore;
    hsdp.training.attention = AttentionKernel::Eager;
    hsdp.training.frozen_regex = "layers\\.0\\.";
    out.emplace_back("pythia-160m HSDP 2x4 reshard 2, no_sync, attn-core AC", lowered(hsdp));
    Plan offload = makePlan("gpt2", Strategy::ShardGradOp, 1, 4);
    offload.sharding.fsdp_version = 1;
    offload.training.offload = Offload::Cpu;
    offload.training.ac = Checkpointing::Full;
    out.emplace_back("gpt2 FSDP1 SHARD_GRAD_OP CPU offload, full AC", lowered(offload));
    return out;
}

std::filesystem::path tempDir() {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("shardcast-program-io-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                      std::to_string(static_cast<long>(std::hash<std::string>{}(
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))));
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace

// Written here, read and written again by another process (program_file_copy), read back here:
// equal to the Program in memory, and so is the file read directly.
TEST(ProgramIoTest, RoundTripsThroughAFileAndAnotherProcess) {
    const auto dir = tempDir();
    int n = 0;
    for (const auto& [name, program] : samplePrograms()) {
        ASSERT_GT(program.size(), 0) << name;
        const auto in = dir / ("program-" + std::to_string(n) + ".json");
        const auto out = dir / ("copy-" + std::to_string(n) + ".json");
        ++n;
        ASSERT_TRUE(writeProgramFile(in, program).ok()) << name;
        const std::string command =
            std::string("\"") + SHARDCAST_PROGRAM_FILE_COPY + "\" \"" + in.string() + "\" \"" + out.string() + "\"";
        ASSERT_EQ(std::system(command.c_str()), 0) << name << ": " << command;
        auto copied = loadProgramFile(out);
        ASSERT_TRUE(copied.ok()) << name << ": " << copied.error().message;
        EXPECT_TRUE(*copied == program) << name;
        EXPECT_EQ(programToJson(*copied), programToJson(program)) << name;
        auto direct = loadProgramFile(in);
        ASSERT_TRUE(direct.ok()) << name << ": " << direct.error().message;
        EXPECT_TRUE(*direct == program) << name;
        std::cout << "[ round trip ] " << name << ": " << program.size() << " tasks, " << program.mem.size()
                  << " memory events, " << program.ops.size() << " ops, " << program.groups.size() << " groups, "
                  << std::filesystem::file_size(in) << " bytes of JSON\n";
    }
    std::filesystem::remove_all(dir);
}

// A change anywhere makes the Programs differ (operator== compares every field).
TEST(ProgramIoTest, EqualityComparesEveryPart) {
    const Program p = lowered(makePlan("pythia-160m", Strategy::HybridShard, 2, 4));
    Program q = p;
    EXPECT_TRUE(q == p);
    q.ops[3].k += 1;
    EXPECT_FALSE(q == p);
    q = p;
    q.mem[5].buffer += 1;
    EXPECT_FALSE(q == p);
    q = p;
    q.groups[1].nodes += 1;
    EXPECT_FALSE(q == p);
    q = p;
    q.units[2].activation_bytes += 1;
    EXPECT_FALSE(q == p);
    q = p;
    q.tasks[7].dtype = DType::F16;
    EXPECT_FALSE(q == p);
}

// A file of format version 2 is refused with a message naming the file and both versions.
TEST(ProgramIoTest, RefusesANewerFormatVersion) {
    const auto dir = tempDir();
    const auto path = dir / "future.json";
    json j = programToJson(lowered(makePlan("pythia-160m", Strategy::FullShard, 1, 4)));
    j["version"] = 2;
    ASSERT_TRUE(writeFileAtomically(path, j.dump()).ok());
    auto loaded = loadProgramFile(path);
    ASSERT_FALSE(loaded.ok());
    const std::string& message = loaded.error().message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("version 2"), std::string::npos) << message;
    EXPECT_NE(message.find("version 1"), std::string::npos) << message;
    std::cout << "[ refused ] " << message << '\n';
    std::filesystem::remove_all(dir);
}

namespace {

struct BadInput {
    const char* name;
    void (*breakIt)(json&);
    const char* expected;  // part of the message
};

}  // namespace

// Bad values are errors that name the field (or, for a broken contract, the task).
TEST(ProgramIoTest, BadInputNamesTheField) {
    const json good = programToJson(lowered(makePlan("pythia-160m", Strategy::HybridShard, 2, 4)));
    const BadInput cases[] = {
        {"unknown task kind", [](json& j) { j["tasks"][3]["kind"] = "XYZ"; }, "field 'tasks[3].kind' must be one of FWD"},
        {"bytes as a string", [](json& j) { j["mem"][0]["bytes"] = "12"; }, "field 'mem[0].bytes' must be an integer"},
        {"negative GEMM size", [](json& j) { j["ops"][2]["m"] = -1; }, "field 'ops[2].m' must be an integer from 0"},
        {"span of one number", [](json& j) { j["tasks"][1]["deps"] = json::array({1}); }, "field 'tasks[1].deps' must be [offset, count]"},
        {"missing pool", [](json& j) { j.erase("groups"); }, "field 'groups' is missing"},
        {"unknown field", [](json& j) { j["units"][0]["colour"] = "red"; }, "field 'units[0].colour' is not a field"},
        {"fractional bytes", [](json& j) { j["initial"]["Temp"] = 1.5; }, "field 'initial.Temp' must be an integer"},
        {"tasks not an array", [](json& j) { j["tasks"] = json::object(); }, "field 'tasks' must be an array"},
        {"empty group", [](json& j) { j["groups"][0]["size"] = 0; }, "field 'groups[0].size' must be an integer from 1"},
        {"dependency beyond int32", [](json& j) { j["deps"][0] = int64_t{1} << 40; }, "field 'deps[0]' must be an integer"},
        {"unknown stream", [](json& j) { j["mem"][4]["stream"] = "side"; }, "field 'mem[4].stream' must be one of compute"},
        {"unknown category", [](json& j) { j["mem"][4]["category"] = "Cache"; }, "field 'mem[4].category' must be one of Sharded Param"},
        {"unknown dtype", [](json& j) { j["tasks"][0]["dtype"] = "int4"; }, "field 'tasks[0].dtype' must be one of fp32"},
        {"ops span outside the pool", [](json& j) { j["tasks"][5]["ops"] = json::array({999999, 1}); }, ": task 5 ("},
        {"tensors that do not sum to their buffer",
         [](json& j) { j["tensor_bytes"][0] = j["tensor_bytes"][0].get<int64_t>() + 512; },
         "but its tensors (buffer_tensors) sum to"},
        {"tensor span outside the pool", [](json& j) { j["buffer_tensors"][0] = json::array({999999, 1}); },
         "buffer_tensors[0] runs past tensor_bytes"},
        {"not a program", [](json& j) { j["format"] = "shardcast-plan"; }, "field 'format' must be \"shardcast-program\""},
    };
    for (const BadInput& c : cases) {
        json j = good;
        c.breakIt(j);
        auto p = programFromJson(j, "bad.json");
        ASSERT_FALSE(p.ok()) << c.name;
        EXPECT_EQ(p.error().message.rfind("bad.json: ", 0), 0u) << c.name << ": " << p.error().message;
        EXPECT_NE(p.error().message.find(c.expected), std::string::npos) << c.name << ": " << p.error().message;
    }
}

// Any field of any kind of object set to null (or dropped) is an error naming it, never a crash.
TEST(ProgramIoTest, EveryFieldIsChecked) {
    const json good = programToJson(lowered(makePlan("pythia-160m", Strategy::HybridShard, 2, 4)));
    int checked = 0;
    auto tryObject = [&](const json::json_pointer& at) {
        for (const auto& item : good.at(at).items()) {
            if (at.empty() && (item.key() == "format" || item.key() == "version")) continue;
            const std::string field = (at.empty() ? "" : at.to_string().substr(1) + ".") + item.key();
            for (bool drop : {false, true}) {
                json j = good;
                if (drop) {
                    j.at(at).erase(item.key());
                } else {
                    j.at(at)[item.key()] = nullptr;
                }
                auto p = programFromJson(j, "null.json");
                ASSERT_FALSE(p.ok()) << field << (drop ? " dropped" : " null");
                ++checked;
            }
        }
    };
    for (const char* at : {"", "/tasks/4", "/mem/3", "/ops/1", "/units/2", "/groups/1", "/initial"}) {
        tryObject(json::json_pointer(at));
    }
    EXPECT_GT(checked, 100);
}
