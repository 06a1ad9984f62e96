// End to end: `scripts/mpirun.sh -np 2 shardcast calibrate --backend cpu --quick` writes a profile
// that the simulator loads, with figures a CPU can have, and that `shardcast simulate --profile`
// uses; bad input ends with exit 2 and nothing written.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/base/host_info.hpp"
#include "core/plan/cluster.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast {
namespace {

namespace fs = std::filesystem;

std::string mpirun(int ranks) {
    return std::string("bash ") + SHARDCAST_SOURCE_DIR + "/scripts/mpirun.sh -np " + std::to_string(ranks) + " ";
}

int exitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

std::string readFile(const fs::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CalibrateCliTest : public ::testing::Test {
protected:
    void SetUp() override {
        m_dir = fs::temp_directory_path() / ("shardcast_calibrate_test_" + std::to_string(getpid()));
        fs::create_directories(m_dir);
    }
    void TearDown() override { fs::remove_all(m_dir); }
    fs::path m_dir;
};

sim::HardwareProfile h100Defaults() {
    core::ClusterSpec cluster;
    cluster.gpu = *core::findGpuPreset("H100-SXM");
    return sim::HardwareProfile::fromCluster(cluster);
}

int64_t memTotal() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemTotal:") return kb * 1024;
        in.ignore(256, '\n');
    }
    return 0;
}

bool finitePositive(double x) { return std::isfinite(x) && x > 0; }

TEST_F(CalibrateCliTest, TwoRanksWriteAProfileTheSimulatorLoadsAndUses) {
    const fs::path profile = m_dir / "cpu.json";
    const fs::path json_out = m_dir / "out.json";
    const std::string cmd = mpirun(2) + SHARDCAST_BIN + " calibrate --backend cpu --quick --json --out " +
                            profile.string() + " > " + json_out.string();
    ASSERT_EQ(exitCode(std::system(cmd.c_str())), 0) << cmd;

    // Loaded over a GPU preset with the simulator's own loader: every GPU figure is the CPU's.
    auto p = sim::loadProfile(profile, h100Defaults());
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->gpu.name.rfind("cpu-", 0), 0u) << p->gpu.name;
    EXPECT_NE(p->gpu.source.find("calibrated"), std::string::npos);
    EXPECT_NE(p->gpu.source.find("2 MPI rank"), std::string::npos) << p->gpu.source;
    // One core of any CPU of the last 15 years: 0.1 - 1000 GFLOP/s fp32, 0.1 - 1000 GB/s memory.
    EXPECT_TRUE(finitePositive(p->gpu.peak_flops_fp32));
    EXPECT_GT(p->gpu.peak_flops_fp32, 1e8);
    EXPECT_LT(p->gpu.peak_flops_fp32, 1e12);
    EXPECT_EQ(p->gpu.peak_flops_bf16, p->gpu.peak_flops_fp32);
    EXPECT_EQ(p->gpu.peak_flops_fp16, p->gpu.peak_flops_fp32);
    EXPECT_GT(p->gpu.hbm_bytes_per_s, 1e8);
    EXPECT_LT(p->gpu.hbm_bytes_per_s, 1e12);
    EXPECT_EQ(p->hbm_efficiency, 1.0);
    // The faster pass defines the peak: one eff_max is exactly 1, both in (0, 1].
    EXPECT_DOUBLE_EQ(std::max(p->forward_efficiency_max, p->backward_efficiency_max), 1.0);
    EXPECT_GT(p->forward_efficiency_max, 0.0);
    EXPECT_GT(p->backward_efficiency_max, 0.0);
    EXPECT_GE(p->gemm_half_flops, 0.0);
    EXPECT_TRUE(std::isfinite(p->gemm_half_flops));
    // Shared-memory MPI between two ranks: 1 MB/s - 1 TB/s; latency under 100 ms (microseconds on an
    // idle machine, but a waiting rank sleeps between MPI_Tests and a busy one wakes it late).
    EXPECT_TRUE(finitePositive(p->gpu.nvlink_bytes_per_s));
    EXPECT_GT(p->gpu.nvlink_bytes_per_s, 1e6);
    EXPECT_LT(p->gpu.nvlink_bytes_per_s, 1e12);
    for (double e : {p->nvlink_all_gather_efficiency, p->nvlink_reduce_scatter_efficiency,
                     p->nvlink_all_reduce_efficiency}) {
        EXPECT_GT(e, 0.0);
        EXPECT_LE(e, 1.0);
    }
    EXPECT_DOUBLE_EQ(std::max({p->nvlink_all_gather_efficiency, p->nvlink_reduce_scatter_efficiency,
                               p->nvlink_all_reduce_efficiency}),
                     1.0);
    EXPECT_GE(p->gpu.intra_node_latency_s, 0.0);
    EXPECT_LT(p->gpu.intra_node_latency_s, 0.1);
    EXPECT_TRUE(std::isfinite(p->busbw_half_bytes));
    EXPECT_GE(p->busbw_half_bytes, 0.0);
    // Measured overlap: at least 1 (the simulator only slows compute), at most 20x on any machine.
    EXPECT_GE(p->overlap_compute_slowdown, 1.0);
    EXPECT_LT(p->overlap_compute_slowdown, 20.0);
    EXPECT_EQ(p->gpu.memory_bytes, memTotal());
    EXPECT_EQ(p->gpu.cuda_context_bytes, 0);
    EXPECT_EQ(p->gpu.nccl_bytes_per_communicator, 0);
    EXPECT_EQ(p->task_launch_ns, 0);
    // The node's cores, which the simulator shares among the ranks computing at once; this
    // process may run on as many (sched_getaffinity), and the note says how the ranks took turns.
    EXPECT_EQ(p->host_cores, core::hostCores());

    // --json: the measured points (2 ranks: the world only) and the profile that was written.
    const nlohmann::json j = nlohmann::json::parse(readFile(json_out));
    EXPECT_EQ(j.at("world_size"), 2);
    EXPECT_EQ(j.at("eigen_threads"), 1);
    const auto& coll = j.at("measured").at("collectives");
    EXPECT_EQ(coll.size(), 3u * 5u);  // 3 ops x 5 quick sizes (1 KiB, 16 KiB, 256 KiB, 4 MiB, 16 MiB)
    for (const auto& c : coll) {
        EXPECT_EQ(c.at("group_size"), 2);
        EXPECT_GE(c.at("bytes").get<int64_t>(), int64_t{1} << 10);
        EXPECT_LE(c.at("bytes").get<int64_t>(), int64_t{16} << 20);
        // nccl-tests' definitions (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw x (n-1)/n for
        // all-gather and reduce-scatter, x 2(n-1)/n for all-reduce; n = 2 gives 1/2 and 1.
        const double algbw = c.at("bytes").get<double>() / c.at("seconds").get<double>();
        EXPECT_NEAR(c.at("algbw_bytes_per_s").get<double>(), algbw, algbw * 1e-12);
        const double factor = c.at("op") == "all-reduce" ? 1.0 : 0.5;
        EXPECT_NEAR(c.at("busbw_bytes_per_s").get<double>(), algbw * factor, algbw * 1e-12) << c.at("op");
    }
    // The profile's overlap factor is the measured GEMM slowdown, floored at 1.
    const auto& overlap = j.at("measured").at("overlap");
    EXPECT_DOUBLE_EQ(overlap.at("compute_slowdown").get<double>(),
                     overlap.at("gemm_overlapped_seconds").get<double>() / overlap.at("gemm_alone_seconds").get<double>());
    EXPECT_DOUBLE_EQ(p->overlap_compute_slowdown, std::max(1.0, overlap.at("compute_slowdown").get<double>()));
    EXPECT_EQ(j.at("profile"), sim::profileToJson(*p));
    const std::string turns = core::hostCores() >= 2 ? "by every rank at once" : "by 1 ranks at a time (2 turns)";
    bool noted = false;
    for (const auto& note : j.at("notes")) noted = noted || note.get<std::string>().find(turns) != std::string::npos;
    EXPECT_TRUE(noted) << j.at("notes").dump();

    // `simulate --profile` runs on it and reports the CPU's figures, not the preset's.
    const fs::path sim_out = m_dir / "sim.json";
    const fs::path used = m_dir / "used.json";
    const std::string simulate = std::string(SHARDCAST_BIN) +
                                 " simulate --model gpt2 --gpus-per-node 2 --seq-len 128 --micro-batch 1 --profile " +
                                 profile.string() + " --save-profile " + used.string() + " --json > " +
                                 sim_out.string();
    ASSERT_EQ(exitCode(std::system(simulate.c_str())), 0) << simulate;
    auto in_effect = sim::loadProfile(used, h100Defaults());
    ASSERT_TRUE(in_effect.ok()) << in_effect.error().message;
    EXPECT_EQ(in_effect->gpu.name, p->gpu.name);
    EXPECT_EQ(in_effect->gpu.peak_flops_fp32, p->gpu.peak_flops_fp32);
    EXPECT_EQ(in_effect->gpu.nvlink_bytes_per_s, p->gpu.nvlink_bytes_per_s);
    // The report's MFU denominator and capacity are the CPU's.
    const nlohmann::json report = nlohmann::json::parse(readFile(sim_out));
    EXPECT_DOUBLE_EQ(report.at("peak_flops").get<double>(), p->gpu.peak_flops_fp32);
    EXPECT_EQ(report.at("capacity_bytes").get<int64_t>(), p->gpu.memory_bytes);
    EXPECT_GT(report.at("step_s").get<double>(), 0.0);
}

TEST_F(CalibrateCliTest, OneRankMeasuresComputeAndSaysCollectivesNeedMoreRanks) {
    const fs::path profile = m_dir / "one.json";
    const fs::path text = m_dir / "out.txt";
    const std::string cmd = mpirun(1) + SHARDCAST_BIN + " calibrate --backend cpu --quick --out " +
                            profile.string() + " > " + text.string();
    ASSERT_EQ(exitCode(std::system(cmd.c_str())), 0) << cmd;
    const std::string out = readFile(text);
    EXPECT_NE(out.find("collectives not measured: this world has 1 rank"), std::string::npos) << out;
    EXPECT_NE(out.find("placeholder"), std::string::npos) << out;
    EXPECT_EQ(out.find("all-gather      "), std::string::npos) << "no collective rows with one rank";
    EXPECT_NE(out.find("(GFLOP/s)"), std::string::npos) << "units in the table's headers";
    EXPECT_NE(out.find("(GB/s)"), std::string::npos);
    auto p = sim::loadProfile(profile, h100Defaults());
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_GT(p->gpu.peak_flops_fp32, 1e8);
}

TEST_F(CalibrateCliTest, OtherBackendsAreBadInputNamingTheValidOne) {
    const fs::path err = m_dir / "err.txt";
    const std::string cmd = std::string(SHARDCAST_BIN) + " calibrate --backend tpu 2> " + err.string();
    EXPECT_EQ(exitCode(std::system(cmd.c_str())), 2);
    const std::string message = readFile(err);
    EXPECT_NE(message.find("--backend"), std::string::npos) << message;
    EXPECT_NE(message.find("cpu"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda"), std::string::npos) << message;
}

TEST_F(CalibrateCliTest, OutIntoAMissingDirectoryIsBadInputAndWritesNothing) {
    const fs::path missing = m_dir / "no_such_dir";
    const fs::path err = m_dir / "err.txt";
    const std::string cmd = mpirun(2) + SHARDCAST_BIN + " calibrate --backend cpu --quick --out " +
                            (missing / "p.json").string() + " 2> " + err.string();
    EXPECT_EQ(exitCode(std::system(cmd.c_str())), 2);
    const std::string message = readFile(err);
    EXPECT_NE(message.find(missing.string()), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(missing));
    // Nothing else appeared beside it either (no temporary file of an atomic write).
    EXPECT_EQ(std::distance(fs::directory_iterator(m_dir), fs::directory_iterator()), 1) << "only err.txt";
}

}  // namespace
}  // namespace shardcast
