// `shardcast run`: execute a plan's Program for real on a backend and write the measured run
// (core::RunRecord). Launched once per rank: `mpirun -np N shardcast run PLAN --backend cpu`.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "core/host_info.hpp"
#include "core/plan_build.hpp"
#include "core/run_record.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/evaluation.hpp"
#ifdef SHARDCAST_WITH_CPU_BACKEND
#include "backend_cpu/cpu_backend.hpp"
#include "backend_cpu/mpi_session.hpp"
#include "executor/executor.hpp"
#include <mpi.h>
#endif

namespace shardcast::cli {
namespace {

struct RunOptions {
    core::PlanOverrides plan;
    std::string backend = "cpu", out, trace, profile;
    int32_t steps = 3, warmup = 1;
    bool verify = false;
};

#ifdef SHARDCAST_WITH_CPU_BACKEND
std::optional<int64_t> envInt(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0') return std::nullopt;
    return x;
}

#endif

constexpr const char* kInstallMpi =
    "install MPI and Eigen (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin libeigen3-dev), "
    "rebuild shardcast (cmake finds them and builds the CPU backend), and launch one process per rank with "
    "`scripts/mpirun.sh -np N shardcast run ...`";

int runRun(const RunOptions& o) {
    if (o.backend != "cpu") {
        return reportInputError("--backend " + o.backend + ": this shardcast runs plans on `cpu` only (the CUDA backend is not built)");
    }
#ifndef SHARDCAST_WITH_CPU_BACKEND
    return reportInputError(std::string("this shardcast was built without the MPI CPU backend that `run` needs: ") +
                            kInstallMpi);
#else
    // Every rank checks its input; only rank 0 (by the launcher's environment) says what is wrong.
    const int64_t env_rank = envInt("OMPI_COMM_WORLD_RANK").value_or(0);
    auto inputError = [env_rank](const std::string& message) {
        return env_rank == 0 ? reportInputError(message) : kExitBadInput;
    };
    auto plan = core::buildPlan(o.plan);
    if (!plan) return inputError(plan.error().message);
    auto profile = sim::resolveProfile(plan->cluster, o.profile);
    if (!profile) return inputError("--profile " + profile.error().message);
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    sim::Evaluator evaluator;
    sim::Evaluation predicted;
    if (auto s = evaluator.evaluate(*plan, &*profile, options, predicted); !s) return inputError(s.error().message);

    // Ranks: one process per GPU of the plan, started by mpirun. Checked before MPI starts, from
    // the launcher's environment, so that a mismatch is one line and exit 2 on every rank.
    const int64_t needed = predicted.program.world_size;
    const std::optional<int64_t> launched = envInt("OMPI_COMM_WORLD_SIZE");
    const int64_t world = launched.value_or(1);
    if (world != needed) {
        if (env_rank != 0) return kExitBadInput;
        const std::string how =
            fmt::format("launch it as `scripts/mpirun.sh -np {} shardcast run ...` (mpirun with the flags a container "
                        "needs), or plan for {} rank{} with `--nodes 1 --gpus-per-node {}`",
                        needed, world, world == 1 ? "" : "s", world);
        if (!launched) {
            return reportInputError(fmt::format("the plan needs {} ranks (nodes {} x gpus-per-node {}) but this process "
                                                "was not launched under mpirun (world size 1): {}; mpirun comes with "
                                                "OpenMPI (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin)",
                                                needed, plan->cluster.nodes, plan->cluster.gpus_per_node, how));
        }
        return reportInputError(fmt::format("mpirun started {} ranks but the plan needs {} (nodes {} x gpus-per-node {}): {}",
                                            world, needed, plan->cluster.nodes, plan->cluster.gpus_per_node, how));
    }
    // Memory: every rank on this machine holds the predicted peak of counted allocations (kernel
    // scratch comes on top); refused before anything is allocated.
    const int64_t local_ranks = std::max<int64_t>(1, envInt("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1));
    const int64_t available = core::meminfoBytes("MemAvailable");
    const int64_t predicted_peak = predicted.summary.peak_bytes;
    if (available > 0 && predicted_peak * local_ranks > available) {
        if (env_rank != 0) return kExitBadInput;
        return reportInputError(fmt::format(
            "the plan's predicted peak is {} bytes ({}) per rank, {} bytes ({}) for the {} rank{} on this machine, but "
            "MemAvailable is {} bytes ({}): use a smaller model, --seq-len, --micro-batch or fewer ranks per machine",
            predicted_peak, core::formatBytes(predicted_peak), predicted_peak * local_ranks,
            core::formatBytes(predicted_peak * local_ranks), local_ranks, local_ranks == 1 ? "" : "s", available,
            core::formatBytes(available)));
    }

    auto session = cpu::MpiSession::start(nullptr, nullptr);
    if (!session) {
        fmt::print(stderr, "shardcast: error: {}\n", session.error().message);
        return kExitRuntimeFailure;
    }
    const cpu::MpiSession& mpi = **session;
    if (mpi.worldSize() != needed) {  // a launcher other than OpenMPI's mpirun
        if (mpi.rank() == 0) {
            reportInputError(fmt::format("MPI started {} ranks but the plan needs {} (nodes {} x gpus-per-node {})",
                                         mpi.worldSize(), needed, plan->cluster.nodes, plan->cluster.gpus_per_node));
        }
        return kExitBadInput;
    }
    cpu::CpuBackend backend(mpi, o.verify);
    exec::Executor executor(backend);
    const bool progress = mpi.rank() == 0 && stderrIsTerminal();
    if (progress) {  // on a terminal: one line, rewritten after each step
        executor.onStep([](int32_t done, int32_t total) {
            fmt::print(stderr, "\rstep {}/{}{}", done, total, done == total ? "\r            \r" : "");
            std::fflush(stderr);
        });
    }
    auto run = executor.run(predicted.program, {.warmup = o.warmup, .steps = o.steps});
    if (!run) mpi.abort(run.error().message);  // ends every rank: peers may wait in a collective
    // Rank 0 reports the verified collectives of every rank.
    int64_t verified[2] = {backend.collectivesVerified(), backend.elementsVerified()};
    int64_t verified_all[2] = {0, 0};
    MPI_Reduce(verified, verified_all, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (mpi.rank() != 0) return kExitOk;
    // Every allocation was counted by buffer id where the Program says: the counted high-water
    // marks are the Program's events placed on the measured timeline. Anything else is a bug of
    // the executor, and the record would not describe the run: none is written.
    if (run->counted_high_water != run->memory.max_per_category) {
        for (int c = 0; c < core::kMemCategoryCount; ++c) {
            const auto k = static_cast<size_t>(c);
            if (run->counted_high_water[k] == run->memory.max_per_category[k]) continue;
            fmt::print(stderr, "shardcast: error: rank 0 counted a {} high-water mark of {} bytes but the Program's events "
                       "on the measured timeline reach {} bytes (an executor bug); no run record written\n",
                       core::categoryName(static_cast<core::MemCategory>(c)), run->counted_high_water[k],
                       run->memory.max_per_category[k]);
        }
        return kExitRuntimeFailure;
    }

    core::RunRecord record;
    record.backend = "cpu";
    record.world_size = mpi.worldSize();
    record.recorded_rank = 0;
    record.compute_note = cpu::kComputeNote;
    record.plan = core::planToJson(*plan);
    record.profile = sim::profileToJson(predicted.profile);
    record.environment = {{"hostname", core::hostName()},
                          {"processor", core::cpuModelName()},
                          {"mpi_library", mpi.libraryVersion()},
                          {"eigen_simd", cpu::eigenSimd()},
                          {"eigen_threads", cpu::eigenThreads()},
                          {"local_ranks", mpi.localRanks()},
                          {"worker_threads_per_rank", run->worker_threads},
                          {"verify", o.verify},
                          {"clock", "steady_clock from the exit of an MPI_Barrier before each step"}};
    record.warmup_steps = o.warmup;
    record.step_ns = run->step_ns;
    record.median_step = run->median_step;
    record.timeline = run->timeline;
    record.memory = run->memory;
    if (!o.out.empty()) {
        if (auto saved = core::saveRunRecord(o.out, record); !saved) {
            fmt::print(stderr, "shardcast: error: {}\n", saved.error().message);
            return kExitRuntimeFailure;
        }
    }
    if (!o.trace.empty()) {
        if (auto written = sim::writeChromeTrace(o.trace, predicted.program, run->timeline, &run->memory); !written) {
            fmt::print(stderr, "shardcast: error: {}\n", written.error().message);
            return kExitRuntimeFailure;
        }
    }

    const auto [lo, hi] = std::minmax_element(run->step_ns.begin(), run->step_ns.end());
    fmt::print("Ran {} on {} ranks (backend cpu, {} worker threads per rank), {} warmup + {} measured steps\n",
               plan->model_ref, mpi.worldSize(), run->worker_threads, o.warmup, o.steps);
    fmt::print("Compute             {}\n", cpu::kComputeNote);
    fmt::print("Step time (median)  {:10.2f} ms   spread {:.2f} .. {:.2f} ms (min .. max of {} steps)\n",
               static_cast<double>(record.medianStepNs()) * 1e-6, static_cast<double>(*lo) * 1e-6,
               static_cast<double>(*hi) * 1e-6, o.steps);
    fmt::print("Predicted step      {:10.2f} ms   on profile {}\n", predicted.summary.step_s * 1e3, predicted.profile.gpu.name);
    if (o.profile.empty()) {
        fmt::print("  note: predicted with the plan's GPU preset; predictions of a CPU run need a profile from "
                   "`shardcast calibrate --backend cpu` (then --profile)\n");
    }
    fmt::print("Stream busy (median step, rank 0)\n");
    for (int st = 0; st < core::kStreamCount; ++st) {
        const int64_t busy = run->timeline.stream_busy_ns[static_cast<size_t>(st)];
        if (busy == 0) continue;
        fmt::print("  {:<18}{:10.2f} ms\n", core::streamName(static_cast<core::Stream>(st)), static_cast<double>(busy) * 1e-6);
    }
    fmt::print("Peak memory         {:>12} (counted allocations, rank 0)   predicted {}\n",
               core::formatBytes(run->memory.peak_bytes), core::formatBytes(predicted_peak));
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        const auto cat = static_cast<size_t>(c);
        const int64_t high = run->counted_high_water[cat];
        const int64_t want = predicted.timed.max_per_category[cat];
        if (high == 0 && want == 0) continue;
        fmt::print("  {:<18}{:>12} max   predicted {}{}\n", core::categoryName(static_cast<core::MemCategory>(c)),
                   core::formatBytes(high), core::formatBytes(want), high == want ? "" : "   (differs)");
    }
    fmt::print("Tasks               {} per step on rank 0, every one run in {} steps\n", predicted.program.size(),
               o.warmup + o.steps);
    if (o.verify) {
        fmt::print("Verify              OK: {} collectives ({} elements) checked over {} ranks; a mismatch on any rank "
                   "aborts the run\n",
                   verified_all[0], verified_all[1], mpi.worldSize());
    }
    if (!o.out.empty()) fmt::print("Run record written to {}\n", o.out);
    if (!o.trace.empty()) fmt::print("Chrome trace written to {}\n", o.trace);
    std::fflush(stdout);
    return kExitOk;
#endif
}

}  // namespace

void registerRunCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "Execute the plan for real on a backend, one process per rank "
                                              "(`mpirun -np N shardcast run PLAN`), and measure its step");
    addPlanOptions(*cmd, opts->plan);
    cmd->add_option("--backend", opts->backend, "Backend that runs the Program")->check(CLI::IsMember({"cpu"}))
        ->capture_default_str();
    cmd->add_option("--steps", opts->steps, "Measured steps (the median one is recorded)")
        ->check(CLI::Range(1, 100000))->capture_default_str();
    cmd->add_option("--warmup", opts->warmup, "Steps run first and discarded")->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->add_flag("--verify", opts->verify, "Check every collective's data: gathered parameters equal the originals, reduced gradients the mean over the group's ranks (docs/running.md)");
    cmd->add_option("--out", opts->out, "Write the measured run (core::RunRecord JSON) to FILE")->type_name("FILE");
    cmd->add_option("--trace", opts->trace, "Write the measured step as a Chrome trace to FILE")->type_name("FILE");
    cmd->add_option("--profile", opts->profile, "Hardware profile JSON for the prediction recorded with the run")
        ->type_name("FILE");
    cmd->callback([opts, &exit_code] { exit_code = runRun(*opts); });
}

}  // namespace shardcast::cli
