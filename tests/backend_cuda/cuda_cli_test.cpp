// `shardcast run --backend cuda` where it can be tested without a GPU: the machine without a
// usable GPU or driver exits 1 with one line naming cudaGetDeviceCount, and bad input exits 2
// naming the flag before any device is touched. On a machine with a GPU the no-GPU case skips.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace {

struct Outcome {
    int exit_code = -1;
    std::string err;
};

Outcome runShardcast(const std::string& args) {
    const auto err = std::filesystem::temp_directory_path() / ("shardcast_cuda_cli_" + std::to_string(::getpid()) + ".err");
    const std::string cmd = std::string(SHARDCAST_BIN) + " " + args + " > /dev/null 2> " + err.string();
    const int status = std::system(cmd.c_str());
    std::ifstream in(err);
    std::stringstream text;
    text << in.rdbuf();
    std::filesystem::remove(err);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

const std::string kModel = std::string(" --model ") + SHARDCAST_SOURCE_DIR + "/models/tiny-llama.json --seq-len 64 --micro-batch 1";

TEST(CudaCliTest, NoUsableGpuExitsOneNamingCudaGetDeviceCount) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
        GTEST_SKIP() << "this machine has " << count << " CUDA device(s): the no-GPU path cannot be exercised here";
    }
    const Outcome o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 1 --steps 1 --warmup 0");
    EXPECT_EQ(o.exit_code, 1) << o.err;
    EXPECT_NE(o.err.find("--backend cuda needs a usable NVIDIA GPU and driver"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("cudaGetDeviceCount"), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "one line expected: " << o.err;
    // The same for an emulated rank of a larger plan: the device is needed there too.
    const Outcome e = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 8 --emulate-rank 3");
    EXPECT_EQ(e.exit_code, 1) << e.err;
    EXPECT_NE(e.err.find("cudaGetDeviceCount"), std::string::npos) << e.err;
}

TEST(CudaCliTest, BadInputExitsTwoNamingTheFlag) {
    Outcome o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 4 --emulate-rank 4");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--emulate-rank 4: the plan has ranks 0 to 3"), std::string::npos) << o.err;

    o = runShardcast("run --backend cpu" + kModel + " --nodes 1 --gpus-per-node 1 --emulate-rank 0");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--emulate-rank: only --backend cuda"), std::string::npos) << o.err;

    o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 2 --emulate-rank 0 --verify");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--verify checks the data collectives communicate"), std::string::npos) << o.err;

    // A multi-rank plan run as one process without --emulate-rank: the ranks are missing.
    o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 2");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("the plan needs 2 ranks"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("--emulate-rank"), std::string::npos) << o.err;
}

}  // namespace
