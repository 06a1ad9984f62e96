#pragma once
// `shardcast calibrate`, shared by its backends. cmd_calibrate.cpp parses the flags and fits traced
// runs (--from-trace); the backends measure this machine: calibrate_cpu.cpp (MPI + Eigen;
// backends/cpu_missing.cpp in a build without MPI) and calibrate_cuda.cpp (in shardcast-cuda; in
// shardcast, backends/cuda_exec.cpp hands the command line over). Each source is compiled once.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cli {

struct CalibrateOptions {
    std::string backend;                  // cpu | cuda; empty with --from-trace
    std::vector<std::string> from_trace;  // torch.profiler traces of a real run of --plan
    std::string plan;
    std::string profile;                  // --from-trace: the profile to start from (default: the plan's GPU preset)
    TraceImportFlags trace_flags;
    std::string out;
    bool json = false;
    bool quick = false;
    SaveRequest save;
    int32_t gpus = 0;                     // cuda: GPUs 0 .. gpus-1; 0: every visible one
    std::string model = "llama-3.1-8b";   // cuda: the plan whose GEMM and attention shapes are measured
    int64_t seq_len = 0;                  // cuda: its sequence length; 0: the plan's default
};

// Errors of --out before minutes of measuring: its directory must exist and it must not be one.
std::optional<std::string> outError(const std::string& out, const std::string& default_name);
// A progress bar on stderr (the backends call it on a terminal).
void printProgress(int done, int total, std::string_view what);
inline double percentError(double fitted, double measured) { return (fitted - measured) / measured * 100; }
// "all-gather", "reduce-scatter" or "all-reduce", as the calibration tables name collectives.
const char* collectiveName(core::TaskKind kind);

// The end of a calibration that succeeded or failed: the profile written atomically to `out`,
// then `to_json`'s object or `print`'s tables on stdout.
template <class Calibration, class ToJson, class Print>
int writeCalibration(const core::Result<Calibration>& result, const std::string& out, const SaveRequest& save,
                     const std::string& default_name, bool json, ToJson to_json, Print print) {
    if (!result) {
        fmt::print(stderr, "shardcast: error: calibrate: {}\n", result.error().message);
        return kExitRuntimeFailure;
    }
    if (auto saved = sim::saveProfile(out, result->profile); !saved) {
        return reportInputError("--out: " + saved.error().message);
    }
    std::string saved_line;
    if (save.requested) {
        auto stored = saveCalibratedProfile(save, result->profile, default_name);
        if (!stored) {
            fmt::print(stderr, "shardcast: error: --save: {}\n", stored.error().message);
            return kExitRuntimeFailure;
        }
        saved_line = *stored;
    }
    if (json) {
        auto j = to_json(*result, out);
        if (!saved_line.empty()) j["saved"] = saved_line;
        fmt::print("{}\n", j.dump(2));
    } else {
        print(*result, out);
        if (!saved_line.empty()) fmt::print("{}\n", saved_line);
    }
    return kExitOk;
}

// The backends: measure, fit and write the profile (rank 0 writes and prints).
int calibrateOnCpu(const CalibrateOptions& o);   // calibrate_cpu.cpp; backends/cpu_missing.cpp without MPI
int calibrateOnCuda(const CalibrateOptions& o);  // calibrate_cuda.cpp in shardcast-cuda; backends/cuda_exec.cpp in shardcast

}  // namespace shardcast::cli
