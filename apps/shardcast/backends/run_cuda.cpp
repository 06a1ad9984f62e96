// `shardcast run --backend cuda` (in shardcast-cuda): one process per GPU under mpirun or srun,
// one process with a thread per GPU (--gpus N), or one process emulating one rank (--emulate-rank).
// Built with SHARDCAST_WITH_CPU_BACKEND where the CPU backend's MPI session is there to meet the
// ranks.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/backends/run_backend.hpp"
#include "apps/shardcast/commands.hpp"
#include "backend_cuda/cuda_backend.hpp"
#include "backend_cuda/device_info.hpp"
#include "core/base/host_info.hpp"
#include "core/base/launch_env.hpp"
#include "executor/in_process_world.hpp"
#ifdef SHARDCAST_WITH_CPU_BACKEND
#include <mpi.h>

#include "backend_cpu/mpi_session.hpp"
#endif

namespace shardcast::cli {
namespace {

#ifdef SHARDCAST_WITH_CPU_BACKEND
// The CUDA backend's ranks meet through MPI (the CPU backend's session): NCCL's unique ids travel
// in an MPI_Allgather.
class MpiBootstrap final : public cuda::Bootstrap {
public:
    explicit MpiBootstrap(const cpu::MpiSession& session) : m_session(session) {}
    int32_t rank() const override { return m_session.rank(); }
    int32_t worldSize() const override { return m_session.worldSize(); }
    core::Status allGather(const void* mine, int64_t bytes, void* all) override {
        const int n = static_cast<int>(bytes);
        return cpu::mpiCheck(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather", rank());
    }
    core::Status barrier() override { return cpu::mpiCheck(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank()); }
    void abort(const std::string& message) noexcept override { m_session.abort(message); }

private:
    const cpu::MpiSession& m_session;
};
#endif

// One process that is the whole world (a 1-rank plan run without mpirun).
class SoloBootstrap final : public cuda::Bootstrap {
public:
    int32_t rank() const override { return 0; }
    int32_t worldSize() const override { return 1; }
    core::Status allGather(const void* mine, int64_t bytes, void* all) override {
        std::memcpy(all, mine, static_cast<size_t>(bytes));
        return core::Ok{};
    }
    core::Status barrier() override { return core::Ok{}; }
    void abort(const std::string& message) noexcept override {
        std::fprintf(stderr, "shardcast: error: %s\n", message.c_str());
        std::fflush(stderr);
        std::_Exit(kExitRuntimeFailure);
    }
};

// How a cuda run's ranks were started, for the record and the report.
struct CudaRunShape {
    bool emulate = false;
    int64_t needed = 1;       // the plan's world size
    int64_t local_ranks = 1;  // ranks on this machine
    std::string mode, clock;
};

// The recording rank's end of a cuda run: the environment, the device-side cross-checks and the
// report. `verified`: collectives and elements verified over all ranks.
int finishCudaRun(const RunOptions& o, const PreparedRun& prepared, const exec::Execution& run, cuda::CudaBackend& backend,
                  int device, const CudaRunShape& shape, const std::array<int64_t, 2>& verified) {
    const core::Plan& plan = prepared.plan;
    const int32_t me = backend.rank();
    core::RunRecord record;
    record.backend = "cuda";
    record.world_size = static_cast<int32_t>(shape.needed);
    record.recorded_rank = me;
    record.compute_note = std::string(cuda::kComputeNote) + (shape.emulate ? cuda::kEmulatedNote : "");
    record.emulated_tasks = backend.emulatedTasks();
    record.environment = cuda::environment(device);
    record.environment["hostname"] = core::hostName();
    record.environment["local_ranks"] = shape.local_ranks;
    record.environment["worker_threads_per_rank"] = run.worker_threads;
    record.environment["mode"] = shape.mode;
    record.environment["clock"] = shape.clock;
    // The timeline is the host's (steady_clock around each task, as every backend's); the GPU's
    // own view of the same median step is its start / end events per task, summed per stream.
    const std::array<int64_t, core::kStreamCount> by_events = backend.eventBusyNs(o.warmup + run.median_step);
    nlohmann::json events = nlohmann::json::object();
    for (int st = 0; st < core::kStreamCount; ++st) {
        const int64_t host_ns = run.timeline.stream_busy_ns[static_cast<size_t>(st)];
        if (host_ns == 0 && by_events[static_cast<size_t>(st)] == 0) continue;
        events[std::string(core::streamName(static_cast<core::Stream>(st)))] = {
            {"cuda_events_ns", by_events[static_cast<size_t>(st)]}, {"host_clock_ns", host_ns}};
    }
    record.environment["stream_busy_median_step"] = {
        {"what", "per stream, the median step's task durations summed: between each task's cudaEventRecord pair on "
                 "its stream (cudaEventElapsedTime) and by the host clock around the task; the Host stream's tasks run on the "
                 "CPU, so their events bracket no GPU work"},
        {"streams", events}};
    if (auto check = backend.memoryCheck(); check) {
        record.environment["device_memory"] = {
            {"counted_peak_bytes", run.memory.peak_bytes},
            {"pool_reserved_high_bytes", check->pool_reserved_high_bytes},
            {"pool_used_high_bytes", check->pool_used_high_bytes},
            {"device_used_bytes_after_run", check->device_used_bytes},
            {"device_total_bytes", check->device_total_bytes},
            {"what", "the counted buffers' cudaMemPool (release threshold UINT64_MAX) high-water marks over the whole "
                     "run, Program::initial and the counting allocator's cache of freed blocks included; "
                     "cudaMemGetInfo's total - free after the run, with CUDA context, cuBLASLt and NCCL buffers and "
                     "kernel scratch"}};
    } else {
        record.environment["device_memory"] = {{"error", check.error().message}};
    }
    FinishText text;
    const std::string gpu = record.environment.value("gpu", "unknown GPU");
    text.ran = shape.emulate
                   ? fmt::format("Ran {} as rank {} of {} alone on GPU {} ({}; backend cuda, collectives emulated, {} "
                                 "worker threads), {} warmup + {} measured steps",
                                 plan.model_ref, me, shape.needed, device, gpu, run.worker_threads, o.warmup, o.steps)
                   : fmt::format("Ran {} on {} ranks (backend cuda on {}, {}, {} worker threads per rank), {} warmup + {} "
                                 "measured steps",
                                 plan.model_ref, shape.needed, gpu, shape.mode, run.worker_threads, o.warmup, o.steps);
    text.profile_note = "  note: predicted with the plan's GPU preset; `shardcast calibrate --backend cuda` measures "
                        "this GPU and writes a profile for --profile";
    record.environment["verify"] = o.verify;
    if (o.verify) {
        text.verify = fmt::format("Verify              OK: {} collectives ({} elements) checked over {} ranks; a mismatch on any "
                                  "rank aborts the run",
                                  verified[0], verified[1], shape.needed);
    }
    return finishRun(o, prepared, run, std::move(record), text);
}


// `--gpus N`: every rank a thread of this process on its own GPU (ranks 0 .. N-1 on devices
// 0 .. N-1), meeting in an InProcessWorld; NCCL between the threads' communicators. Rank 0's
// timeline is recorded.
int runCudaThreads(const RunOptions& o, const PreparedRun& prepared, CudaRunShape shape) {
    const auto n = static_cast<int32_t>(shape.needed);
    exec::InProcessWorld world(n);
    // Created here, before any thread runs: creating touches no peer, and this thread can then
    // abort every rank's communicators when one rank fails.
    std::vector<std::unique_ptr<cuda::CudaBackend>> backends;
    for (int32_t r = 0; r < n; ++r) {
        cuda::CudaBackendOptions options;
        options.device = r;
        options.world_size = n;
        options.verify = o.verify;
        options.predicted_peak_bytes = prepared.predicted.summary.peak_bytes;
        for (int32_t peer = 0; peer < n; ++peer) options.peer_devices.push_back(peer);
        auto backend = cuda::CudaBackend::create(options, &world.member(r));
        if (!backend) {
            fmt::print(stderr, "shardcast: error: GPU {}: {}\n", r, backend.error().message);
            return kExitRuntimeFailure;
        }
        backends.push_back(std::move(*backend));
    }
    // Each rank's Program: under pipeline parallelism its stage's.
    std::vector<core::Program> stage_programs(static_cast<size_t>(n));
    std::vector<const core::Program*> programs;
    for (int32_t r = 0; r < n; ++r) {
        auto program = rankProgram(prepared, r, stage_programs[static_cast<size_t>(r)]);
        if (!program) {
            fmt::print(stderr, "shardcast: error: rank {}: {}\n", r, program.error().message);
            return kExitRuntimeFailure;
        }
        programs.push_back(*program);
    }
    std::vector<std::optional<core::Result<exec::Execution>>> runs(static_cast<size_t>(n));
    std::atomic<int32_t> finished{0};
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            exec::Executor executor(*backends[static_cast<size_t>(r)]);
            if (r == 0) progressOnTerminal(executor);
            auto run = executor.run(*programs[static_cast<size_t>(r)], {.warmup = o.warmup, .steps = o.steps});
            // A failure before any task (prepare, initial memory) has not aborted the world yet.
            if (!run) world.member(r).abort(run.error().message);
            runs[static_cast<size_t>(r)] = std::move(run);
            ++finished;
        });
    }
    // A rank that failed aborted the world; its peers may be blocked in a collective that will
    // never complete: abort every rank's communicators so their streams return.
    bool communicators_aborted = false;
    while (finished.load() < n) {
        if (!communicators_aborted && world.aborted()) {
            for (auto& b : backends) b->abortCommunicators();
            communicators_aborted = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (std::thread& t : threads) t.join();
    if (world.aborted()) {
        fmt::print(stderr, "shardcast: error: {}\n", world.abortMessage());
        return kExitRuntimeFailure;
    }
    std::array<int64_t, 2> verified{};
    for (auto& b : backends) {
        verified[0] += b->collectivesVerified();
        verified[1] += b->elementsVerified();
    }
    shape.mode = fmt::format("one process, a thread per GPU ({} GPUs)", n);
    shape.clock = "steady_clock from the exit of an in-process barrier (after cudaDeviceSynchronize) before each step";
    return finishCudaRun(o, prepared, **runs[0], *backends[0], 0, shape, verified);
}

// `shardcast run --backend cuda`: one process per GPU under mpirun or srun, one process with a
// thread per GPU (--gpus N), or one process emulating one rank (--emulate-rank). Input errors
// exit 2; a machine without a usable GPU exits 1.

}  // namespace

int runOnCuda(const RunOptions& o) {
    const core::LaunchEnv launch = core::processLaunchEnv();
    const auto inputError = rankZeroInputError;
    if (o.verify && o.emulate_rank >= 0) {
        return inputError("--verify checks the data collectives communicate, and --emulate-rank communicates nothing: "
                          "use one of them");
    }
    const bool threads = o.gpus > 0;
    if (threads && o.emulate_rank >= 0) {
        return inputError("--gpus runs every rank of the plan, one GPU each, and --emulate-rank one rank alone: use one "
                          "of them");
    }
    if (threads && launch.launched()) {
        return inputError(fmt::format("--gpus starts a thread per GPU in one process, but {} started {} processes: "
                                      "drop --gpus (each process is one rank) or launch one process without {}",
                                      core::launcherName(launch.launcher), launch.world_size,
                                      core::launcherName(launch.launcher)));
    }
    auto prepared = prepareRun(o);
    if (!prepared) return inputError(prepared.error().message);
    const core::Plan* plan = &prepared->plan;
    sim::Evaluation& predicted = prepared->predicted;

    CudaRunShape shape;
    shape.needed = predicted.program.world_size;
    shape.emulate = o.emulate_rank >= 0;
    const int64_t needed = shape.needed;
    const int64_t world = launch.world_size;
    const bool emulate = shape.emulate;
    if (emulate) {
        if (o.emulate_rank >= needed) {
            return inputError(fmt::format("--emulate-rank {}: the plan has ranks 0 to {} (nodes {} x gpus-per-node {})",
                                          o.emulate_rank, needed - 1, plan->cluster.nodes, plan->cluster.gpus_per_node));
        }
        if (world != 1) {
            return inputError(fmt::format("--emulate-rank runs one rank alone in one process, but {} started {} ranks: "
                                          "launch it without {}",
                                          core::launcherName(launch.launcher), world, core::launcherName(launch.launcher)));
        }
    } else if (threads) {
        if (o.gpus != needed) {
            return inputError(fmt::format("--gpus {}: the plan needs {} ranks (nodes {} x gpus-per-node {}), one GPU each: "
                                          "give --gpus {}",
                                          o.gpus, needed, plan->cluster.nodes, plan->cluster.gpus_per_node, needed));
        }
    } else if (world != needed) {
        return inputError(fmt::format("the plan needs {} ranks (nodes {} x gpus-per-node {}) but {} process{} started: run "
                                      "`shardcast run --backend cuda --gpus {}` on a machine with {} GPUs, launch "
                                      "`scripts/mpirun.sh -np {} ...` or `srun --mpi=pmix -n {} ...` with a GPU per rank, "
                                      "or run one rank alone with --emulate-rank R (collectives filled locally)",
                                      needed, plan->cluster.nodes, plan->cluster.gpus_per_node, world,
                                      world == 1 ? " was" : "es were", needed, needed, needed, needed));
    }

    // The GPUs: this process's by its rank on the machine, or the first N for --gpus.
    auto devices = cuda::usableDevices();
    if (!devices) {
        if (launch.rank != 0) return kOtherRankExit;
        return reportNoUsableGpu(devices.error().message);
    }
    shape.local_ranks = threads ? o.gpus : std::max<int64_t>(1, launch.local_size);
    if (shape.local_ranks > *devices || launch.local_rank >= *devices) {
        return inputError(fmt::format("{} ranks run on this machine but it has {} CUDA device{}: one rank per GPU (fewer "
                                      "ranks per machine, or --emulate-rank R on one GPU)",
                                      shape.local_ranks, *devices, *devices == 1 ? "" : "s"));
    }
    const int64_t predicted_peak = predicted.summary.peak_bytes;
    const int first_device = threads ? 0 : static_cast<int>(launch.local_rank);
    const int last_device = threads ? static_cast<int>(o.gpus) - 1 : first_device;
    for (int device = first_device; device <= last_device; ++device) {
        auto memory = cuda::deviceMemory(device);
        if (!memory) {
            fmt::print(stderr, "shardcast: error: {}\n", memory.error().message);
            return kExitRuntimeFailure;
        }
        if (predicted_peak > memory->free_bytes) {
            return inputError(fmt::format(
                "the plan's predicted peak is {} bytes ({}) per rank but GPU {} has {} bytes ({}) free of {} bytes ({}) "
                "(cudaMemGetInfo): use a smaller model, --seq-len or --micro-batch, or more ranks",
                predicted_peak, core::formatBytes(predicted_peak), device, memory->free_bytes,
                core::formatBytes(memory->free_bytes), memory->total_bytes, core::formatBytes(memory->total_bytes)));
        }
    }
    if (threads) return runCudaThreads(o, *prepared, shape);
    const int device = first_device;

    // The ranks' meeting point: MPI under mpirun / srun, none for an emulated rank, the process
    // itself for a 1-rank plan without a launcher. Declared before the backend, so it outlives it.
    std::unique_ptr<cuda::Bootstrap> bootstrap;
#ifdef SHARDCAST_WITH_CPU_BACKEND
    std::unique_ptr<cpu::MpiSession> session;
    if (!emulate && launch.launched()) {
        auto started = cpu::MpiSession::start(nullptr, nullptr);
        if (!started) {
            fmt::print(stderr, "shardcast: error: {}\n", started.error().message);
            return kExitRuntimeFailure;
        }
        session = std::move(*started);
        if (session->worldSize() != needed) {
            if (session->rank() != 0) return kOtherRankExit;
            return reportInputError(fmt::format("MPI started {} ranks but the plan needs {}", session->worldSize(), needed));
        }
        bootstrap = std::make_unique<MpiBootstrap>(*session);
    }
#endif
    if (!emulate && !bootstrap) {
        if (needed > 1) {
            return inputError(fmt::format("this shardcast was built without MPI, which a cuda run of one process per rank "
                                          "needs to meet its ranks: run `--gpus {}` (a thread per GPU, one machine), one "
                                          "rank alone with --emulate-rank R, or rebuild with MPI (apt-get install "
                                          "libopenmpi-dev openmpi-bin libeigen3-dev)",
                                          needed));
        }
        bootstrap = std::make_unique<SoloBootstrap>();
    }
    cuda::CudaBackendOptions backend_options;
    backend_options.device = device;
    backend_options.world_size = static_cast<int32_t>(needed);
    if (emulate) backend_options.emulate_rank = o.emulate_rank;
    backend_options.verify = o.verify;
    backend_options.predicted_peak_bytes = predicted_peak;
    auto backend = cuda::CudaBackend::create(backend_options, emulate ? nullptr : bootstrap.get());
    if (!backend) {
        if (!emulate && needed > 1) bootstrap->abort(backend.error().message);
        fmt::print(stderr, "shardcast: error: {}\n", backend.error().message);
        return kExitRuntimeFailure;
    }
    const int32_t me = (*backend)->rank();
    exec::Executor executor(**backend);
    if (emulate || me == 0) progressOnTerminal(executor);
    core::Program stage_program;  // under pipeline parallelism, the rank's stage's
    auto program = rankProgram(*prepared, me, stage_program);
    if (!program) {
        if (!emulate && needed > 1) bootstrap->abort(program.error().message);
        fmt::print(stderr, "shardcast: error: {}\n", program.error().message);
        return kExitRuntimeFailure;
    }
    auto run = executor.run(**program, {.warmup = o.warmup, .steps = o.steps});
    if (!run) {
        if (!emulate && needed > 1) bootstrap->abort(run.error().message);  // peers may wait in a collective
        fmt::print(stderr, "shardcast: error: {}\n", run.error().message);
        return kExitRuntimeFailure;
    }
    // Rank 0 reports the verified collectives of every rank.
    std::array<int64_t, 2> verified_all = {(*backend)->collectivesVerified(), (*backend)->elementsVerified()};
    if (!emulate && needed > 1) {
        const int64_t mine[2] = {verified_all[0], verified_all[1]};
        std::vector<int64_t> all(static_cast<size_t>(2 * needed));
        if (auto s = bootstrap->allGather(mine, sizeof(mine), all.data()); !s) {
            bootstrap->abort(s.error().message);
            fmt::print(stderr, "shardcast: error: {}\n", s.error().message);
            return kExitRuntimeFailure;
        }
        verified_all = {0, 0};
        for (size_t r = 0; r < all.size(); r += 2) {
            verified_all[0] += all[r];
            verified_all[1] += all[r + 1];
        }
    }
    if (!emulate && me != 0) return kExitOk;  // rank 0 writes and prints
    shape.mode = emulate ? fmt::format("rank {} of {} emulated alone", me, needed)
                         : fmt::format("one process per GPU ({})", core::launcherName(launch.launcher));
    shape.clock = emulate ? "steady_clock after cudaDeviceSynchronize before each step"
                          : "steady_clock from the exit of an MPI_Barrier (after cudaDeviceSynchronize) before each step";
    return finishCudaRun(o, *prepared, *run, **backend, device, shape, verified_all);
}

}  // namespace shardcast::cli
