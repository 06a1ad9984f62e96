// `shardcast run --backend cuda` and `shardcast calibrate --backend cuda` where they can be tested
// without a GPU: the machine without a usable GPU or driver exits 1 with one line naming
// cudaGetDeviceCount, and bad input exits 2 naming the flag before any device is touched. On a
// machine with a GPU the no-GPU cases skip.
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

// `env`: VAR=value assignments for the command's environment (the shell's), may be empty.
Outcome runShardcast(const std::string& args, const std::string& env = "") {
    const auto err = std::filesystem::temp_directory_path() / ("shardcast_cuda_cli_" + std::to_string(::getpid()) + ".err");
    const std::string cmd = env + " " + std::string(SHARDCAST_BIN) + " " + args + " > /dev/null 2> " + err.string();
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

bool haveGpu(int& count) { return cudaGetDeviceCount(&count) == cudaSuccess && count > 0; }

TEST(CudaCliTest, CalibrateWithoutUsableGpuExitsOneWithRunsMessage) {
    int count = 0;
    if (haveGpu(count)) {
        GTEST_SKIP() << "this machine has " << count << " CUDA device(s): the no-GPU path cannot be exercised here";
    }
    const auto out = std::filesystem::temp_directory_path() / ("shardcast_cuda_cal_" + std::to_string(::getpid()) + ".json");
    const Outcome o = runShardcast("calibrate --backend cuda --quick --out " + out.string());
    EXPECT_EQ(o.exit_code, 1) << o.err;
    // The same line as `run --backend cuda` (commands.hpp, reportNoUsableGpu).
    EXPECT_EQ(o.err.rfind("shardcast: error: --backend cuda needs a usable NVIDIA GPU and driver, and this process has "
                          "none: cudaGetDeviceCount",
                          0),
              0u)
        << o.err;
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "one line expected: " << o.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << "no profile may be written without a GPU";
}

TEST(CudaCliTest, CalibrateBadInputExitsTwoBeforeTouchingAGpu) {
    Outcome o = runShardcast("calibrate --backend cuda --model no-such-model");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--model no-such-model"), std::string::npos) << o.err;
    // Two processes under srun: one process drives every GPU, so this is refused.
    o = runShardcast("calibrate --backend cuda", "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("but srun started 2 processes"), std::string::npos) << o.err;
}

TEST(CudaCliTest, GpusBadInputExitsTwoNamingTheFlag) {
    Outcome o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 4 --gpus 2");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--gpus 2: the plan needs 4 ranks"), std::string::npos) << o.err;

    o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 2 --gpus 2 --emulate-rank 0");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--gpus runs every rank"), std::string::npos) << o.err;

    o = runShardcast("run --backend cpu" + kModel + " --nodes 1 --gpus-per-node 2 --gpus 2");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--gpus: only --backend cuda"), std::string::npos) << o.err;

    o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 2 --gpus 2",
                     "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("--gpus starts a thread per GPU in one process, but srun started 2 processes"), std::string::npos)
        << o.err;
}

// srun's variables are a launcher as mpirun's are: its world size is checked against the plan,
// and only rank 0 (SLURM_PROCID) says what is wrong.
TEST(CudaCliTest, SrunWorldSizeIsCheckedAndSaidByRankZeroOnly) {
    Outcome o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 4",
                             "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0");
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find("the plan needs 4 ranks"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("but 2 processes were started"), std::string::npos) << o.err;
    o = runShardcast("run --backend cuda" + kModel + " --nodes 1 --gpus-per-node 4",
                     "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1");
    EXPECT_EQ(o.exit_code, 0) << o.err;  // kOtherRankExit: rank 0's exit is the job's
    EXPECT_TRUE(o.err.empty()) << o.err;
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
