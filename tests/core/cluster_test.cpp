#include "core/plan/cluster.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sc = shardcast::core;
using nlohmann::json;

namespace {

int64_t presetMemory(const char* name) {
    auto g = sc::findGpuPreset(name);
    EXPECT_TRUE(g.has_value()) << name;
    return g ? g->memory_bytes : -1;
}

}  // namespace

TEST(ClusterTest, PresetCapacitiesAreNvidiaSmiMiBTimes2To20) {
    EXPECT_EQ(presetMemory("A100-40G"), int64_t{42949672960});    // 40,960 MiB
    EXPECT_EQ(presetMemory("A100-80G"), int64_t{85899345920});    // 81,920 MiB
    EXPECT_EQ(presetMemory("H100-SXM"), int64_t{85520809984});    // 81,559 MiB
    EXPECT_EQ(presetMemory("H100-PCIe"), int64_t{85520809984});   // 81,559 MiB
    EXPECT_EQ(presetMemory("H200"), int64_t{150754820096});       // 143,771 MiB
    EXPECT_EQ(presetMemory("B200"), int64_t{192265846784});       // 183,359 MiB
    EXPECT_EQ(presetMemory("L40S"), int64_t{48305799168});        // 46,068 MiB
}

TEST(ClusterTest, EveryPresetIsCompleteAndCited) {
    EXPECT_GE(sc::gpuPresets().size(), 7u);
    for (const auto& g : sc::gpuPresets()) {
        EXPECT_GT(g.memory_bytes, 0) << g.name;
        EXPECT_GT(g.peak_flops_bf16, 0) << g.name;
        EXPECT_GT(g.peak_flops_fp32, 0) << g.name;
        EXPECT_GT(g.hbm_bytes_per_s, 0) << g.name;
        EXPECT_GT(g.nvlink_bytes_per_s, 0) << g.name;
        EXPECT_GT(g.network_bytes_per_s, 0) << g.name;
        EXPECT_GT(g.host_link_bytes_per_s, 0) << g.name;
        // A GPU holds a CUDA context; the host as the device (the CPU preset) holds none.
        EXPECT_EQ(g.cuda_context_bytes > 0, !g.host_device) << g.name;
        EXPECT_FALSE(g.source.empty()) << g.name;
    }
}

TEST(ClusterTest, CpuPresetIsTheHostWithItsRamAndNoGpuOverheads) {
    const auto cpu = sc::findGpuPreset("cpu");
    ASSERT_TRUE(cpu);
    EXPECT_EQ(cpu->name, "CPU");
    EXPECT_TRUE(cpu->host_device);
    EXPECT_EQ(cpu->memory_bytes, static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE));
    EXPECT_EQ(cpu->cuda_context_bytes + cpu->cublas_workspace_bytes + cpu->nccl_bytes_per_communicator, 0);
    // host_device survives a GPU file: written only when true, read back, inherited from "base".
    const nlohmann::json j = sc::gpuToJson(*cpu);
    EXPECT_EQ(j.at("host_device"), true);
    EXPECT_FALSE(sc::gpuToJson(*sc::findGpuPreset("H100")).contains("host_device"));
    auto back = sc::gpuFromJson(nlohmann::json{{"base", "cpu"}, {"memory_gib", 8}}, "cpu.json");
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_TRUE(back->host_device);
    auto bad = sc::gpuFromJson(nlohmann::json{{"base", "cpu"}, {"host_device", "yes"}}, "cpu.json");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("cpu.json: host_device must be true or false"), std::string::npos);
}

TEST(ClusterTest, LookupIsCaseInsensitiveWithShortAliases) {
    ASSERT_TRUE(sc::findGpuPreset("h100-sxm"));
    EXPECT_EQ(sc::findGpuPreset("h100-sxm")->name, "H100-SXM");
    EXPECT_EQ(sc::findGpuPreset("H100")->name, "H100-SXM");
    EXPECT_EQ(sc::findGpuPreset("a100")->name, "A100-80G");
    EXPECT_EQ(sc::findGpuPreset("l40s")->name, "L40S");
    EXPECT_FALSE(sc::findGpuPreset("V100").has_value());
    EXPECT_FALSE(sc::findGpuPreset("").has_value());
}

TEST(ClusterTest, PeakFlopsPerDtype) {
    const auto h100 = *sc::findGpuPreset("H100-SXM");
    EXPECT_DOUBLE_EQ(h100.peakFlops(sc::DType::BF16), 989.4e12);  // H100 data sheet, dense
    EXPECT_DOUBLE_EQ(h100.peakFlops(sc::DType::F16), 989.4e12);
    // PyTorch's allow_tf32 is off for matmuls by default: fp32 runs at the FP32 rate.
    EXPECT_DOUBLE_EQ(h100.peakFlops(sc::DType::F32), 66.9e12);
    EXPECT_DOUBLE_EQ(h100.peakFlops(sc::DType::F8), 1978.9e12);
    const auto a100 = *sc::findGpuPreset("A100-80G");
    EXPECT_DOUBLE_EQ(a100.peakFlops(sc::DType::BF16), 312e12);
    EXPECT_DOUBLE_EQ(a100.peakFlops(sc::DType::F8), 312e12);  // no FP8 on Ampere: falls back to bf16
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("H200")->peakFlops(sc::DType::BF16), 989.4e12);
}

TEST(ClusterTest, CublasWorkspaceFollowsPyTorchDefaults) {
    // CUBLAS_WORKSPACE_CONFIG ":4096:8" on Hopper+ and ":4096:2:16:8" before.
    EXPECT_EQ(sc::findGpuPreset("H100-SXM")->cublas_workspace_bytes, 32 * sc::kMiB);
    EXPECT_EQ(sc::findGpuPreset("B200")->cublas_workspace_bytes, 32 * sc::kMiB);
    EXPECT_EQ(sc::findGpuPreset("A100-80G")->cublas_workspace_bytes, 8 * sc::kMiB + 128 * sc::kKiB);
    EXPECT_EQ(sc::findGpuPreset("L40S")->cublas_workspace_bytes, 8 * sc::kMiB + 128 * sc::kKiB);
}

TEST(ClusterTest, GpuJsonOverridesBase) {
    const json j = {{"base", "h100-sxm"}, {"name", "H100-NVL"}, {"memory_gib", 94}, {"hbm_bytes_per_s", 3.9e12}};
    auto g = sc::gpuFromJson(j, "gpu.json");
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_EQ(g->name, "H100-NVL");
    EXPECT_EQ(g->memory_bytes, 94 * sc::kGiB);
    EXPECT_DOUBLE_EQ(g->hbm_bytes_per_s, 3.9e12);
    EXPECT_DOUBLE_EQ(g->peak_flops_bf16, 989.4e12);  // kept from the base
    EXPECT_EQ(g->cublas_workspace_bytes, 32 * sc::kMiB);

    auto bytes = sc::gpuFromJson({{"base", "A100-40G"}, {"memory_bytes", 1000}}, "gpu.json");
    ASSERT_TRUE(bytes);
    EXPECT_EQ(bytes->memory_bytes, 1000);
}

TEST(ClusterTest, GpuJsonUnknownKeyNamesKeyAndValidOnes) {
    auto g = sc::gpuFromJson({{"base", "H100-SXM"}, {"memory_gb", 80}}, "gpu.json");
    ASSERT_FALSE(g);
    EXPECT_NE(g.error().message.find("gpu.json"), std::string::npos) << g.error().message;
    EXPECT_NE(g.error().message.find("memory_gb"), std::string::npos) << g.error().message;
    EXPECT_NE(g.error().message.find("memory_bytes"), std::string::npos) << g.error().message;
    EXPECT_NE(g.error().message.find("hbm_bytes_per_s"), std::string::npos) << g.error().message;
}

TEST(ClusterTest, GpuJsonRejectsBadValues) {
    for (const json& j : {json{{"base", "H100-SXM"}, {"memory_bytes", 0}},
                          json{{"base", "H100-SXM"}, {"memory_bytes", -5}},
                          json{{"base", "H100-SXM"}, {"memory_gib", -1}},
                          json{{"base", "H100-SXM"}, {"nvlink_bytes_per_s", 0}},
                          json{{"base", "H100-SXM"}, {"peak_flops_bf16", "fast"}},
                          json{{"base", "H100-SXM"}, {"memory_bytes", 1.5}},
                          json{{"base", "V100"}},
                          json{{"name", "mine"}, {"memory_bytes", 1000}},  // no base, capacities missing
                          json{{"base", "A100-80G"}, {"nccl_ctas", 108}},   // every SM of 108
                          json{{"base", "A100-80G"}, {"nccl_ctas", 2.5}},
                          json{{"base", "H100-SXM"}, {"mma_sync_fraction", 1.5}},
                          json{{"base", "H100-SXM"}, {"max_matmul_flops_bf16", -1}},
                          json::array()}) {
        auto g = sc::gpuFromJson(j, "gpu.json");
        EXPECT_FALSE(g) << j.dump();
        if (!g) {
            EXPECT_EQ(g.error().message.rfind("gpu.json: ", 0), 0u) << g.error().message;
        }
    }
}

// The p4de file torchtitan_test uses: AWS's 400 Gb/s of EFA per 8 GPUs, NCCL on 8 of 108 SMs.
TEST(ClusterTest, P4deGpuFileKeepsTheA100AndSetsItsNetwork) {
    auto g = sc::resolveGpu(std::string(SHARDCAST_SOURCE_DIR) + "/examples/gpus/a100-80g-p4de.json");
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_DOUBLE_EQ(g->network_bytes_per_s, 400e9 / 8 / 8);
    EXPECT_EQ(g->nccl_ctas, 8);
    EXPECT_EQ(g->sm_count, 108);
    EXPECT_DOUBLE_EQ(g->max_matmul_flops_bf16, 267.9e12);
}

// The presets' best-shape rates are the MAMF table's (tests/data/reference-cases.json).
TEST(ClusterTest, MatmulCapsAreTheMeasuredBestShapeRates) {
    std::ifstream in(SHARDCAST_REFERENCE_FILE);
    const json ref = json::parse(in)["max_achievable_matmul_bf16"];
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("A100-80G")->max_matmul_flops_bf16, ref["A100_SXM"]["tflops"].get<double>() * 1e12);
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("A100-40G")->max_matmul_flops_bf16, ref["A100_SXM"]["tflops"].get<double>() * 1e12);
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("H100-SXM")->max_matmul_flops_bf16, ref["H100_SXM"]["tflops"].get<double>() * 1e12);
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("H100-PCIe")->max_matmul_flops_bf16, 0.0);  // the SXM figure does not apply
}

// The best-shape cap follows the clock: measured at the TDP, it scales with cbrt(power) below it.
TEST(ClusterTest, MatmulCapScalesWithThePowerLimitClock) {
    auto h100 = sc::findGpuPreset("H100-SXM");
    ASSERT_TRUE(h100);
    EXPECT_DOUBLE_EQ(h100->matmulFlopsCap(), 792.1e12);
    h100->power_limit_w = 500;
    EXPECT_NEAR(h100->matmulFlopsCap(), 792.1e12 * std::cbrt(500.0 / 700), 1e3);
    EXPECT_DOUBLE_EQ(sc::findGpuPreset("L40S")->matmulFlopsCap(), 0.0);  // no measurement: no cap
}

TEST(ClusterTest, GpuJsonRoundTrips) {
    for (const auto& preset : sc::gpuPresets()) {
        auto back = sc::gpuFromJson(sc::gpuToJson(preset), "roundtrip");
        ASSERT_TRUE(back) << back.error().message;
        EXPECT_EQ(sc::gpuToJson(*back), sc::gpuToJson(preset)) << preset.name;
        EXPECT_EQ(back->memory_bytes, preset.memory_bytes);
    }
}

TEST(ClusterTest, ResolveGpuPresetFileOrError) {
    auto preset = sc::resolveGpu("h200");
    ASSERT_TRUE(preset);
    EXPECT_EQ(preset->name, "H200");

    const auto path = std::filesystem::temp_directory_path() / "shardcast_cluster_test_gpu.json";
    {
        std::ofstream out(path);
        out << R"({"base": "A100-80G", "name": "A100-calibrated", "hbm_bytes_per_s": 1.8e12})";
    }
    auto file = sc::resolveGpu(path.string());
    ASSERT_TRUE(file) << file.error().message;
    EXPECT_EQ(file->name, "A100-calibrated");
    EXPECT_DOUBLE_EQ(file->hbm_bytes_per_s, 1.8e12);
    EXPECT_EQ(file->memory_bytes, int64_t{81920} * sc::kMiB);
    std::filesystem::remove(path);

    auto missing = sc::resolveGpu("V100-32G");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("V100-32G"), std::string::npos);
    EXPECT_NE(missing.error().message.find("H100-SXM"), std::string::npos);
}

TEST(ClusterTest, WorldSize) {
    sc::ClusterSpec c;
    c.nodes = 4;
    c.gpus_per_node = 8;
    EXPECT_EQ(c.worldSize(), 32);
}
