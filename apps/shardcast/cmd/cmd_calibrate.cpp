// `shardcast calibrate --backend cpu|cuda`: measure this machine, fit the cost curves, write a
// profile. cpu: run under `mpirun -np N` to measure collectives; rank 0 prints and writes, the
// others take part. cuda: one process drives --gpus local GPUs (in `shardcast-cuda`, which
// `shardcast` hands the command line to, as `run --backend cuda` does). --from-trace: fit the
// profile to a traced PyTorch run. This file: the flags, the shared helpers and --from-trace; the
// backends are named in apps/shardcast/backends/calibrate_backend.hpp.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/backends/calibrate_backend.hpp"
#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "measured/run_calibration.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cli {

std::optional<std::string> outError(const std::string& out, const std::string& default_name) {
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::absolute(out, ec).parent_path();
    if (ec || !std::filesystem::is_directory(parent, ec)) {
        return "--out " + out + ": directory " + parent.string() +
               " does not exist (create it, or give a file in an existing directory)";
    }
    if (std::filesystem::is_directory(out, ec)) {
        return "--out " + out + " is a directory; give the profile file's path, e.g. " +
               (std::filesystem::path(out) / (default_name + ".json")).string();
    }
    return std::nullopt;
}

void printProgress(int done, int total, std::string_view what) {
    constexpr int kWidth = 30;
    const int filled = done * kWidth / total;
    fmt::print(stderr, "\r[{}{}] {:3d}% {:<32.32}", std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(kWidth - filled), '.'), done * 100 / total, what);
    if (done == total) fmt::print(stderr, "\n");
    std::fflush(stderr);
}

const char* collectiveName(core::TaskKind kind) {
    switch (kind) {
        case core::TaskKind::AllGather: return "all-gather";
        case core::TaskKind::ReduceScatter: return "reduce-scatter";
        default: return "all-reduce";
    }
}

namespace {

// `calibrate --from-trace TRACE... --plan PLAN.json --out PROFILE.json`: the profile that makes the
// plan's prediction match the traced run (measured/run_calibration.hpp).
int runCalibrateFromTrace(const CalibrateOptions& o) {
    if (!o.backend.empty()) return reportInputError("--from-trace fits a profile to a traced run: it takes no --backend");
    if (o.plan.empty()) return reportInputError("--from-trace needs --plan PLAN.json: the plan the traced run trained with");
    if (o.out.empty()) return reportInputError("--from-trace needs --out PROFILE.json: where to write the fitted profile");
    auto imported = importTorchTraces(o.from_trace, o.plan, o.profile, o.trace_flags);
    if (!imported) return reportInputError(imported.error().message);
    std::vector<uint8_t> skip(imported->predicted.program.tasks.size(), 0);
    for (const int32_t id : imported->import.run.unmeasured_tasks) skip[static_cast<size_t>(id)] = 1;
    const std::string source = fmt::format("fitted to a traced {} run of {} (step {}, rank {})", imported->import.flavour,
                                           o.plan, imported->import.step_number, imported->import.run.recorded_rank);
    auto fit = sim::calibrateFromRun(imported->plan, imported->predicted.profile, imported->import.run.timeline, skip, source,
                                     imported->import.task_ops);
    if (!fit) return reportInputError(o.plan + ": " + fit.error().message);
    if (auto saved = sim::saveProfile(o.out, fit->profile); !saved) {
        fmt::print(stderr, "shardcast: error: {}\n", saved.error().message);
        return kExitRuntimeFailure;
    }
    if (o.json) {
        nlohmann::json j = sim::runCalibrationToJson(*fit);
        j["out"] = o.out;
        fmt::print("{}\n", j.dump(2));
        return kExitOk;
    }
    printImportSummary(imported->import, imported->predicted.program);
    fmt::print("\nStep: measured {:.3f} ms; predicted {:.3f} ms before the fit, {:.3f} ms after\n",
               static_cast<double>(fit->measured_step_ns) / 1e6, static_cast<double>(fit->predicted_step_before_ns) / 1e6,
               static_cast<double>(fit->predicted_step_after_ns) / 1e6);
    fmt::print("{:<34}{:>14}{:>14}  {}\n", "figure", "before", "after", "from");
    for (const sim::RunFitLine& l : fit->lines) {
        fmt::print("{:<34}{:>14.6g}{:>14.6g}  {}{}\n", l.figure, l.before, l.after, l.fitted ? "fitted: " : "", l.from);
    }
    fmt::print("Profile written to {}; predict other plans on this cluster with --profile {}\n", o.out, o.out);
    return kExitOk;
}

int runCalibrate(const CalibrateOptions& o) {
    if (!o.from_trace.empty()) return runCalibrateFromTrace(o);
    if (o.backend.empty()) return reportInputError("calibrate needs --backend cpu|cuda (measure this machine) or --from-trace TRACE... --plan PLAN.json (fit a traced run)");
    if (!o.plan.empty() || !o.profile.empty()) return reportInputError("--plan and --profile go with --from-trace");
    if (o.backend == "cuda") return calibrateOnCuda(o);
    return calibrateOnCpu(o);
}

}  // namespace

void registerCalibrateCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<CalibrateOptions>();
    CLI::App* cmd = app.add_subcommand(
        "calibrate", "Measure this machine (GEMM, memory, collectives, their overlap) and write a hardware profile "
                     "for --profile; run as `scripts/mpirun.sh -np N shardcast calibrate --backend cpu` with the N "
                     "ranks `run` will use (one rank alone measures no collectives). Or fit the profile to a real "
                     "PyTorch run of a plan: --from-trace TRACE... --plan PLAN.json");
    cmd->add_option("--backend", opts->backend,
                    "Backend to calibrate (required unless --from-trace): cpu (Eigen fp32 GEMMs and MPI) or cuda (cuBLASLt, HBM and NCCL over the local "
                    "GPUs; needs a build with the CUDA toolkit)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--from-trace", opts->from_trace,
                    "Instead of measuring: fit a profile to a real PyTorch run of --plan, from its torch.profiler traces "
                    "(files or directories; docs/trace-import.md). Fits compute efficiencies and, where the run has "
                    "collectives of two sizes, their bandwidth and latency; says which figures it kept")
        ->type_name("TRACE");
    cmd->add_option("--plan", opts->plan, "With --from-trace: the plan the traced run trained with")->type_name("PLAN.json");
    cmd->add_option("--profile", opts->profile, "With --from-trace: the profile to start from (default: the plan's GPU preset)")
        ->type_name("NAME|FILE");
    addTraceImportOptions(*cmd, opts->trace_flags);
    cmd->add_option("--out", opts->out,
                    "Profile file to write, atomically (default: cpu-<hostname>.json, or cuda-<GPU name>.json)")
        ->type_name("FILE");
    cmd->add_flag("--json", opts->json, "Print the measured points, the fits and the profile as one JSON object");
    addSaveOption(*cmd, opts->save,
                  "the profile for `--profile NAME` (default NAME: cpu-HOST or the GPU's, as the default --out file is named)");
    cmd->add_flag("--quick", opts->quick,
                  "cpu: fewer, smaller GEMM shapes and collectives of 1 KiB - 16 MiB instead of 1 KiB - 256 MiB (for "
                  "tests); cuda: fewer repetitions, square sizes and HBM sizes, collectives of 1 KiB - 16 MiB");
    cmd->add_option("--gpus", opts->gpus, "cuda: calibrate GPUs 0 .. N-1 from this process (default: every visible GPU); "
                    "collectives and their overlap need N >= 2")
        ->check(CLI::Range(1, 1 << 16))->type_name("N");
    cmd->add_option("--model", opts->model, "cuda: the model whose GEMM and attention shapes are measured (a name or a "
                    "config file)")->capture_default_str();
    cmd->add_option("--seq-len", opts->seq_len, "cuda: the sequence length of those shapes (default: the model's)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    cmd->callback([opts, &exit_code] { exit_code = runCalibrate(*opts); });
}

}  // namespace shardcast::cli

