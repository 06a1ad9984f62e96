// `shardcast run --backend cpu`: one process per rank under mpirun, the CPU backend (Eigen
// kernels, MPI collectives) running every task of the Program.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/backends/run_backend.hpp"
#include "apps/shardcast/commands.hpp"
#include "backend_cpu/cpu_backend.hpp"
#include "backend_cpu/mpi_session.hpp"
#include "core/base/host_info.hpp"
#include "core/base/launch_env.hpp"

namespace shardcast::cli {

int runOnCpu(const RunOptions& o) {
    // Every rank checks its input; only rank 0 (by the launcher's environment) says what is wrong.
    const core::LaunchEnv launch = core::processLaunchEnv();
    const auto inputError = rankZeroInputError;
    auto prepared = prepareRun(o);
    if (!prepared) return inputError(prepared.error().message);
    const core::Plan* plan = &prepared->plan;
    sim::Evaluation& predicted = prepared->predicted;

    // Ranks: one process per GPU of the plan, started by mpirun. Checked before MPI starts, from
    // the launcher's environment, so that a mismatch is one line and exit 2 on every rank.
    const int64_t needed = predicted.program.world_size;
    const int64_t world = launch.world_size;
    if (world != needed) {
        if (launch.rank != 0) return kOtherRankExit;
        const std::string how =
            fmt::format("launch it as `scripts/mpirun.sh -np {} shardcast run ...` (mpirun with the flags a container "
                        "needs), or plan for {} rank{} with `--nodes 1 --gpus-per-node {}`",
                        needed, world, world == 1 ? "" : "s", world);
        if (!launch.launched()) {
            return reportInputError(fmt::format("the plan needs {} ranks (nodes {} x gpus-per-node {}) but this process "
                                                "was not launched under mpirun (world size 1): {}; mpirun comes with "
                                                "OpenMPI (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin)",
                                                needed, plan->cluster.nodes, plan->cluster.gpus_per_node, how));
        }
        return reportInputError(fmt::format("{} started {} ranks but the plan needs {} (nodes {} x gpus-per-node {}): {}",
                                            core::launcherName(launch.launcher), world, needed, plan->cluster.nodes, plan->cluster.gpus_per_node, how));
    }
    // Memory: every rank on this machine holds the predicted peak of counted allocations (kernel
    // scratch comes on top); refused before anything is allocated.
    const int64_t local_ranks = std::max<int64_t>(1, launch.local_size);
    const int64_t available = core::meminfoBytes("MemAvailable");
    const int64_t predicted_peak = predicted.summary.peak_bytes;
    if (available > 0 && predicted_peak * local_ranks > available) {
        if (launch.rank != 0) return kOtherRankExit;
        return reportInputError(fmt::format(
            "the plan's predicted peak is {} bytes ({}) per rank, {} bytes ({}) for the {} rank{} on this machine, but "
            "MemAvailable is {} bytes ({}): use a smaller model, --seq-len, --micro-batch or fewer ranks per machine",
            predicted_peak, core::formatBytes(predicted_peak), predicted_peak * local_ranks,
            core::formatBytes(predicted_peak * local_ranks), local_ranks, local_ranks == 1 ? "" : "s", available,
            core::formatBytes(available)));
    }

    // A profile calibrated on another machine shares its cores, not this one's: said, not refused.
    if (const int64_t cores = predicted.profile.host_cores; launch.rank == 0 && cores > 0 && cores != core::hostCores()) {
        fmt::print(stderr,
                   "shardcast: note: the profile's host_cores is {} but this process may run on {} cores: the "
                   "prediction shares {} cores among the ranks computing at once; calibrate on this machine "
                   "(scripts/mpirun.sh -np {} shardcast calibrate --backend cpu) for a prediction of it\n",
                   cores, core::hostCores(), cores, needed);
    }
    auto session = cpu::MpiSession::start(nullptr, nullptr);
    if (!session) {
        fmt::print(stderr, "shardcast: error: {}\n", session.error().message);
        return kExitRuntimeFailure;
    }
    const cpu::MpiSession& mpi = **session;
    if (mpi.worldSize() != needed) {  // a launcher other than OpenMPI's mpirun
        if (mpi.rank() != 0) return kOtherRankExit;
        return reportInputError(fmt::format("MPI started {} ranks but the plan needs {} (nodes {} x gpus-per-node {})",
                                            mpi.worldSize(), needed, plan->cluster.nodes, plan->cluster.gpus_per_node));
    }
    cpu::CpuBackend backend(mpi, o.verify);
    exec::Executor executor(backend);
    if (mpi.rank() == 0) progressOnTerminal(executor);
    // Under pipeline parallelism each rank runs its stage's Program; the prediction is rank 0's.
    core::Program stage_program;
    auto program = rankProgram(*prepared, mpi.rank(), stage_program);
    if (!program) mpi.abort(program.error().message);
    auto run = executor.run(**program, {.warmup = o.warmup, .steps = o.steps});
    if (!run) mpi.abort(run.error().message);  // ends every rank: peers may wait in a collective
    // Rank 0 reports the verified collectives of every rank.
    int64_t verified[2] = {backend.collectivesVerified(), backend.elementsVerified()};
    int64_t verified_all[2] = {0, 0};
    MPI_Reduce(verified, verified_all, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (mpi.rank() != 0) return kExitOk;  // rank 0 writes and prints
    core::RunRecord record;
    record.backend = "cpu";
    record.world_size = mpi.worldSize();
    record.recorded_rank = 0;
    record.compute_note = cpu::kComputeNote;
    record.environment = {{"hostname", core::hostName()},
                          {"processor", core::cpuModelName()},
                          {"mpi_library", mpi.libraryVersion()},
                          {"eigen_simd", cpu::eigenSimd()},
                          {"eigen_threads", cpu::eigenThreads()},
                          {"local_ranks", mpi.localRanks()},
                          {"worker_threads_per_rank", run->worker_threads},
                          {"verify", o.verify},
                          {"clock", "steady_clock from the exit of an MPI_Barrier before each step"}};
    FinishText text;
    text.ran = fmt::format("Ran {} on {} ranks (backend cpu, {} worker threads per rank), {} warmup + {} measured steps",
                           plan->model_ref, mpi.worldSize(), run->worker_threads, o.warmup, o.steps);
    text.profile_note = "  note: predicted with the plan's GPU preset; predictions of a CPU run need a profile from "
                        "`shardcast calibrate --backend cpu` (then --profile)";
    if (o.verify) {
        text.verify = fmt::format("Verify              OK: {} collectives ({} elements) checked over {} ranks; a mismatch on any "
                                  "rank aborts the run",
                                  verified_all[0], verified_all[1], mpi.worldSize());
    }
    return finishRun(o, *prepared, *run, std::move(record), text);
}

}  // namespace shardcast::cli
