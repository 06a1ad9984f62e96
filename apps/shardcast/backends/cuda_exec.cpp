// `--backend cuda` in the `shardcast` executable, which links no CUDA library: hands the command
// line to `shardcast-cuda` (run and calibrate share this one way in). Linked into `shardcast`
// only; `shardcast-cuda` links backends/run_cuda.cpp and backends/calibrate_cuda.cpp instead.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/shardcast/backends/calibrate_backend.hpp"
#include "apps/shardcast/backends/run_backend.hpp"
#include "apps/shardcast/commands.hpp"

namespace shardcast::cli {

// `shardcast` links no CUDA library; `shardcast-cuda`, built beside it when cmake found the CUDA
// toolkit with cuBLASLt and NCCL, is the same program with the CUDA backend. Replaces this process
// with it, same command line and same PID (so an mpirun rank stays that rank); returns only on
// failure.
int execCudaBinary() {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::filesystem::path cuda = self.parent_path() / "shardcast-cuda";
    if (ec || access(cuda.c_str(), X_OK) != 0) {
        return reportInputError("--backend cuda: this shardcast was built without the CUDA backend (no executable " +
                                cuda.string() + "; cmake builds it when it finds the CUDA toolkit with cuBLASLt and "
                                "NCCL); use --backend cpu");
    }
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
    if (args.empty()) {
        fmt::print(stderr, "shardcast: error: --backend cuda: cannot read this process's command line from /proc/self/cmdline\n");
        return kExitRuntimeFailure;
    }
    args[0] = cuda.string();
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    execv(cuda.c_str(), argv.data());
    fmt::print(stderr, "shardcast: error: --backend cuda: starting {} failed: {}\n", cuda.string(), std::strerror(errno));
    return kExitRuntimeFailure;
}

int runOnCuda(const RunOptions&) { return execCudaBinary(); }
int calibrateOnCuda(const CalibrateOptions&) { return execCudaBinary(); }

}  // namespace shardcast::cli
