#include "backend_cpu/calibrate.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <Eigen/Core>
#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "backend_cpu/mpi_session.hpp"
#include "backend_cpu/mpi_wait.hpp"
#include "core/base/host_info.hpp"

namespace shardcast::cpu {
namespace {

using core::TaskKind;

// The one MPI wrapper's check (mpi_session.hpp), thrown: a failed call mid-calibration leaves
// the other ranks in a collective, so it unwinds to the command, which aborts them all.
void check(int code, std::string_view call, int32_t rank) {
    if (core::Status s = mpiCheck(code, call, rank); !s) throw std::runtime_error(s.error().message);
}

// A linear layer over T tokens: forward m = T, n = out, k = in; backward dgrad (T, in, out) and
// wgrad (out, in, T), as core::OpShape lists them.
struct Linear {
    int64_t tokens, in, out;
};

struct Sizes {
    std::vector<int64_t> square;  // forward m = n = k
    std::vector<Linear> linears;
    std::vector<int64_t> memory_bytes;      // per operand of the memcpy
    std::vector<int64_t> collective_bytes;  // nccl-tests' S
    int64_t overlap_bytes;                  // the all-gather under the overlapped GEMMs
    double gemm_target_s;                   // time spent per GEMM shape, at least kMinIterations runs
};

constexpr int kMinIterations = 3;
constexpr int kMaxIterations = 50;

Sizes makeSizes(bool quick) {
    Sizes p;
    if (quick) {
        p.square = {32, 64, 128, 256};
        p.linears = {{64, 256, 512}, {128, 512, 512}};  // backward needs two FLOP counts
        p.memory_bytes = {int64_t{32} << 20};  // the two operands exceed a 32 MiB L3
        // Up to 16 MiB: on a busy machine the largest must take well over a scheduler slice, or
        // the times do not grow with the size and no bandwidth fits them.
        p.collective_bytes = {1 << 10, 16 << 10, 256 << 10, 4 << 20, 16 << 20};
        p.overlap_bytes = 1 << 20;
        p.gemm_target_s = 0.02;
    } else {
        p.square = {32, 64, 128, 256, 512, 768, 1024, 1536};
        p.linears = {{128, 512, 2048}, {512, 1024, 1024}, {1024, 1024, 4096}, {2048, 4096, 1024}};
        p.memory_bytes = {int64_t{64} << 20, int64_t{256} << 20};
        // nccl-tests' default sweep style: 1 KiB ... 256 MiB, x4 per step.
        for (int64_t s = 1 << 10; s <= (int64_t{256} << 20); s *= 4) p.collective_bytes.push_back(s);
        p.overlap_bytes = 4 << 20;
        p.gemm_target_s = 0.3;
    }
    return p;
}

// Every timing's statistic: sim::typicalSeconds (the lower quartile, calibration_fit.hpp).
double typical(std::vector<double> v) { return sim::typicalSeconds(std::move(v)); }

double maxOverRanks(double value, MPI_Comm comm, int32_t rank) {
    double out = 0;
    check(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce (max of timings)", rank);
    return out;
}

// Per-iteration times, each the slowest rank's, then their typical value (a collective ends for
// the job when its last rank leaves it).
double typicalOfSlowest(std::vector<double> times, MPI_Comm comm, int32_t rank) {
    std::vector<double> slowest(times.size());
    check(MPI_Allreduce(times.data(), slowest.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, comm),
          "MPI_Allreduce (max of timings)", rank);
    return typical(std::move(slowest));
}

class Progress {
public:
    Progress(const CalibrationOptions& o, int total, bool root) : m_options(&o), m_total(total), m_root(root) {}
    void step(std::string_view what) {
        ++m_done;
        if (m_root && m_options->progress) m_options->progress(m_done, m_total, what);
    }

private:
    const CalibrationOptions* m_options;
    int m_total;
    bool m_root;
    int m_done = 0;
};

// Operands of one GEMM, zero-filled as the backend's scratch buffers are (no denormals, no NaN).
struct GemmBuffers {
    int64_t m, n, k;
    std::vector<float> a, b, c;
    GemmBuffers(int64_t m_, int64_t n_, int64_t k_)
        : m(m_), n(n_), k(k_), a(static_cast<size_t>(m_ * k_)), b(static_cast<size_t>(k_ * n_)),
          c(static_cast<size_t>(m_ * n_)) {}
    // Exactly the backend's kernel (cpu_backend.cpp): C.noalias() = A * B on Eigen maps.
    void run() {
        using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
        Eigen::Map<Matrix> A(a.data(), m, k), B(b.data(), k, n), C(c.data(), m, n);
        C.noalias() = A * B;
    }
};

// A barrier whose waiting ranks sleep (mpi_wait.hpp) instead of spinning on the cores the ranks
// measuring meanwhile need.
void politeBarrier(int32_t rank) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier", rank);
    if (core::Status waited = waitPolitely(request, "MPI_Ibarrier", rank); !waited) {
        throw std::runtime_error(waited.error().message);
    }
}

// Ranks measuring CPU work at once: a node's ranks take turns in groups of at most its cores, so
// that each measures its rate with a core to itself, beside as many ranks as there are cores
// (sharing the caches and the memory bandwidth as the backend's ranks do). The simulator then
// shares the cores among the ranks that compute at once (HardwareProfile::host_cores).
struct Turns {
    int count = 1;  // turns, the same on every rank
    int mine = 0;   // this rank's
    int cores = 1;  // this node's
};

Turns rankTurns(const MpiSession& session) {
    Turns t;
    t.cores = core::hostCores();
    const int mine = (session.localRanks() + t.cores - 1) / t.cores;
    check(MPI_Allreduce(&mine, &t.count, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce", session.rank());
    t.mine = session.localRank() / t.cores;
    return t;
}

// Runs `measure` in this rank's turn; every rank passes every turn's barrier.
template <class F>
void inTurn(const Turns& turns, int32_t rank, F&& measure) {
    for (int turn = 0; turn < turns.count; ++turn) {
        politeBarrier(rank);
        if (turn == turns.mine) measure();
    }
}

// Each rank measures in its turn (Turns); the point is the slowest rank's typical time.
sim::GemmPoint measureGemm(int64_t m, int64_t n, int64_t k, bool backward, double target_s, const Turns& turns,
                           int32_t rank) {
    GemmBuffers g(m, n, k);
    std::vector<double> times;
    inTurn(turns, rank, [&] {
        double t0 = MPI_Wtime();
        g.run();  // warmup: page faults, packing buffers
        const double first = MPI_Wtime() - t0;
        const int iterations = std::clamp(static_cast<int>(target_s / std::max(first, 1e-9)), kMinIterations, kMaxIterations);
        for (int i = 0; i < iterations; ++i) {
            t0 = MPI_Wtime();
            g.run();
            times.push_back(MPI_Wtime() - t0);
        }
    });
    return {m, n, k, backward, maxOverRanks(typical(times), MPI_COMM_WORLD, rank)};
}

// The backend's bandwidth-bound ops are memcpys of half their byte count (read half, write half).
MemoryPoint measureMemory(int64_t bytes, int iterations, const Turns& turns, int32_t rank) {
    std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
    std::vector<double> times;
    inTurn(turns, rank, [&] {
        std::memcpy(dst.data(), src.data(), src.size());  // warmup
        for (int i = 0; i < iterations; ++i) {
            src[static_cast<size_t>(i)] = static_cast<char>(i);
            const double t0 = MPI_Wtime();
            std::memcpy(dst.data(), src.data(), src.size());
            times.push_back(MPI_Wtime() - t0);
        }
    });
    if (dst[0] != src[0]) throw std::runtime_error("memory calibration: memcpy did not copy");
    MemoryPoint p;
    p.buffer_bytes = bytes;
    p.traffic_bytes = 2 * bytes;
    p.seconds = maxOverRanks(typical(times), MPI_COMM_WORLD, rank);
    return p;
}

// Iterations per size: many for small messages (their times are microseconds and noisy), a few
// for large ones.
int collectiveIterations(int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / bytes, 5, 20)); }

// One collective of S bytes (nccl-tests' size: the gathered buffer for all-gather and
// reduce-scatter, the buffer for all-reduce) on `comm` of n ranks, as the backend issues it
// (cpu_backend.cpp): nonblocking, waited for politely (mpi_wait.hpp), fp32 elements with MPI_SUM, reductions then
// divided by n. S is rounded down to whole fp32 elements per rank.
class Collective {
public:
    Collective(TaskKind kind, int64_t bytes, MPI_Comm comm, int group_size, int32_t rank)
        : m_kind(kind), m_comm(comm), m_n(group_size), m_rank(rank) {
        const int64_t unit = static_cast<int64_t>(sizeof(float)) * m_n;
        m_bytes = std::max<int64_t>(bytes / unit, 1) * unit;
        m_per_rank = static_cast<int>(m_bytes / unit);
        m_send.assign(static_cast<size_t>(kind == TaskKind::AllGather ? m_per_rank : m_per_rank * m_n), 1.0f);
        m_recv.assign(static_cast<size_t>(kind == TaskKind::ReduceScatter ? m_per_rank : m_per_rank * m_n), 0.0f);
    }
    int64_t bytes() const { return m_bytes; }
    void run() {
        MPI_Request request = MPI_REQUEST_NULL;
        const char* call = "MPI_Iallreduce";
        int code = MPI_SUCCESS;
        switch (m_kind) {
            case TaskKind::AllGather:
                call = "MPI_Iallgather";
                code = MPI_Iallgather(m_send.data(), m_per_rank, MPI_FLOAT, m_recv.data(), m_per_rank, MPI_FLOAT, m_comm,
                                      &request);
                break;
            case TaskKind::ReduceScatter:
                call = "MPI_Ireduce_scatter_block";
                code = MPI_Ireduce_scatter_block(m_send.data(), m_recv.data(), m_per_rank, MPI_FLOAT, MPI_SUM, m_comm,
                                                 &request);
                break;
            case TaskKind::AllReduce:
                code = MPI_Iallreduce(m_send.data(), m_recv.data(), m_per_rank * m_n, MPI_FLOAT, MPI_SUM, m_comm, &request);
                break;
            default: throw std::logic_error("not a collective");
        }
        check(code, call, m_rank);
        if (core::Status waited = waitPolitely(request, call, m_rank); !waited) {
            throw std::runtime_error(waited.error().message);
        }
        // The backend averages reductions over the group (FSDP's divide factors): one more pass.
        if (m_kind != TaskKind::AllGather) {
            const auto divisor = static_cast<float>(m_n);
            for (float& x : m_recv) x /= divisor;
        }
    }
    // The typical time over `iterations` of the slowest rank, each after a barrier.
    double measure(int iterations) {
        for (int i = 0; i < 2; ++i) run();  // warmup: connections, page faults
        std::vector<double> times;
        for (int i = 0; i < iterations; ++i) {
            check(MPI_Barrier(m_comm), "MPI_Barrier", m_rank);
            const double t0 = MPI_Wtime();
            run();
            times.push_back(MPI_Wtime() - t0);
        }
        return typicalOfSlowest(std::move(times), m_comm, m_rank);
    }

private:
    TaskKind m_kind;
    MPI_Comm m_comm;
    int m_n;
    int32_t m_rank;
    int64_t m_bytes = 0;
    int m_per_rank = 0;
    std::vector<float> m_send, m_recv;
};

// Runs `body` on a thread of its own and waits for it: the backend issues collectives from its
// communication streams' worker threads, never from the thread that initialised MPI.
template <class F>
void onCommThread(F&& body) {
    std::exception_ptr failure;
    std::thread comm([&] {
        try {
            body();
        } catch (...) {
            failure = std::current_exception();
        }
    });
    comm.join();
    if (failure) std::rethrow_exception(failure);
}

// GEMMs on this (compute) thread while a loop of all-gathers runs on a communication thread, on
// every rank at once: how much each slows the other when the two streams overlap. Both ratios are
// the slowest rank's.
OverlapPoint measureOverlap(int64_t gemm_size, int64_t bytes, int32_t rank) {
    OverlapPoint p;
    GemmBuffers g(gemm_size, gemm_size, gemm_size);
    p.gemm_m = p.gemm_n = p.gemm_k = gemm_size;
    std::vector<double> alone;
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank);
    g.run();
    for (int i = 0; i < 15; ++i) {
        const double t0 = MPI_Wtime();
        g.run();
        alone.push_back(MPI_Wtime() - t0);
    }
    p.gemm_alone_s = typical(alone);

    int world = 1;
    check(MPI_Comm_size(MPI_COMM_WORLD, &world), "MPI_Comm_size", rank);
    Collective all_gather(TaskKind::AllGather, bytes, MPI_COMM_WORLD, world, rank);
    p.all_gather_bytes = all_gather.bytes();
    onCommThread([&] { p.all_gather_alone_s = all_gather.measure(10); });
    // Long enough for a few dozen GEMMs to run under it; every rank runs the same count.
    const double window_s = std::max(40 * maxOverRanks(p.gemm_alone_s, MPI_COMM_WORLD, rank), 0.05);
    const int loops = std::clamp(static_cast<int>(window_s / p.all_gather_alone_s), 10, 2000);

    std::atomic<bool> comm_running{true};
    std::vector<double> gemm_times;
    std::vector<double> comm_times;
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank);
    std::exception_ptr failure;
    std::thread comm([&] {
        try {
            for (int i = 0; i < loops; ++i) {
                const double t0 = MPI_Wtime();
                all_gather.run();
                comm_times.push_back(MPI_Wtime() - t0);
            }
        } catch (...) {
            failure = std::current_exception();
        }
        comm_running.store(false, std::memory_order_release);
    });
    // Only GEMMs that started and ended while the all-gathers ran count.
    while (comm_running.load(std::memory_order_acquire)) {
        const double t0 = MPI_Wtime();
        g.run();
        const double t = MPI_Wtime() - t0;
        if (comm_running.load(std::memory_order_acquire)) gemm_times.push_back(t);
    }
    comm.join();
    if (failure) std::rethrow_exception(failure);
    // A rank whose GEMMs all outlasted the loop saw at least one GEMM's worth of overlap.
    p.gemm_overlapped_s = gemm_times.empty() ? p.gemm_alone_s : typical(gemm_times);
    p.gemm_alone_s = maxOverRanks(p.gemm_alone_s, MPI_COMM_WORLD, rank);
    p.gemm_overlapped_s = maxOverRanks(p.gemm_overlapped_s, MPI_COMM_WORLD, rank);
    p.all_gather_overlapped_s = maxOverRanks(typical(comm_times), MPI_COMM_WORLD, rank);
    return p;
}


// The GPU the profile describes before any fit: this host. The 1.0 placeholders are all replaced
// below (by the fits, or by figures derived from the memcpy bandwidth).
core::GpuSpec hostSpec() {
    core::GpuSpec gpu;
    gpu.name = cpuProfileName();
    gpu.memory_bytes = core::physicalMemoryBytes();
    gpu.peak_flops_bf16 = gpu.peak_flops_fp32 = 1.0;
    gpu.hbm_bytes_per_s = gpu.nvlink_bytes_per_s = gpu.network_bytes_per_s = gpu.host_link_bytes_per_s = 1.0;
    return gpu;
}

}  // namespace

std::optional<HostLoad> hostLoad() {
    std::ifstream in("/proc/loadavg");
    HostLoad load;
    if (!(in >> load.load_1min)) return std::nullopt;
    load.cores = core::hostCores();
    return load;
}

std::string cpuProfileName() {
    return "cpu-" + core::hostName();
}

core::Result<CalibrationResult> calibrateCpu(const MpiSession& session, const CalibrationOptions& options) {
    const int32_t rank = session.rank();
    const int world = session.worldSize();
    // One thread per GEMM: the backend runs each rank's compute stream on one worker thread, and
    // the ranks share the cores (Eigen is built without OpenMP here, so this is also its default).
    Eigen::setNbThreads(1);
    const Sizes sizes = makeSizes(options.quick);

    // Groups: the world and, when the world is larger, ranks {0, 1} (a sub-communicator, as the
    // backend builds one per process group). Rank 0 belongs to every group.
    struct Group {
        MPI_Comm comm;
        int size;
    };
    std::vector<Group> groups;
    if (world > 1) groups.push_back({MPI_COMM_WORLD, world});
    MPI_Comm pair = MPI_COMM_NULL;
    if (world > 2) {
        check(MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair), "MPI_Comm_split", rank);
        groups.push_back({pair, 2});  // MPI_COMM_NULL on ranks outside the pair
    }
    constexpr std::array<TaskKind, 3> kKinds = {TaskKind::AllGather, TaskKind::ReduceScatter, TaskKind::AllReduce};

    const int gemm_points = static_cast<int>(sizes.square.size() + 3 * sizes.linears.size());
    const int memory_points = static_cast<int>(sizes.memory_bytes.size());
    const int collective_points = static_cast<int>(groups.size() * kKinds.size() * sizes.collective_bytes.size());
    const int overlap_points = world > 1 ? 1 : 0;
    Progress progress(options, gemm_points + memory_points + collective_points + overlap_points, rank == 0);

    const Turns turns = rankTurns(session);
    CalibrationMeasurements m;
    m.load_at_start = hostLoad();
    m.cores = turns.cores;
    m.turns = turns.count;
    m.world_size = world;
    m.eigen_threads = Eigen::nbThreads();
    m.simd = Eigen::SimdInstructionSetsInUse();
    for (int64_t s : sizes.square) {
        m.gemm.push_back(measureGemm(s, s, s, false, sizes.gemm_target_s, turns, rank));
        progress.step(fmt::format("GEMM {0}x{0}x{0}", s));
    }
    for (const Linear& l : sizes.linears) {
        m.gemm.push_back(measureGemm(l.tokens, l.out, l.in, false, sizes.gemm_target_s, turns, rank));
        progress.step(fmt::format("GEMM forward {}x{}x{}", l.tokens, l.out, l.in));
        m.gemm.push_back(measureGemm(l.tokens, l.in, l.out, true, sizes.gemm_target_s, turns, rank));
        progress.step(fmt::format("GEMM dgrad {}x{}x{}", l.tokens, l.in, l.out));
        m.gemm.push_back(measureGemm(l.out, l.in, l.tokens, true, sizes.gemm_target_s, turns, rank));
        progress.step(fmt::format("GEMM wgrad {}x{}x{}", l.out, l.in, l.tokens));
    }
    for (int64_t bytes : sizes.memory_bytes) {
        m.memory.push_back(measureMemory(bytes, options.quick ? 3 : 5, turns, rank));
        progress.step(fmt::format("memcpy {} MiB", bytes >> 20));
    }
    for (const Group& group : groups) {
        for (TaskKind kind : kKinds) {
            for (int64_t bytes : sizes.collective_bytes) {
                if (group.comm != MPI_COMM_NULL) {
                    onCommThread([&] {
                        Collective c(kind, bytes, group.comm, group.size, rank);
                        const double seconds = c.measure(collectiveIterations(c.bytes()));
                        m.collectives.push_back({kind, group.size, c.bytes(), seconds});
                    });
                }
                progress.step(fmt::format("{} {} B, {} ranks", core::taskKindName(kind), bytes, group.size));
            }
        }
        // Ranks outside the pair wait here for it to finish, so timings never overlap.
        check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank);
    }
    if (pair != MPI_COMM_NULL) check(MPI_Comm_free(&pair), "MPI_Comm_free", rank);
    if (world > 1) {
        m.overlap = measureOverlap(256, sizes.overlap_bytes, rank);
        progress.step("GEMM under all-gather");
    }
    if (rank != 0) return CalibrationResult{};

    CalibrationResult r;
    r.measured = std::move(m);
    auto gemm = sim::fitGemmCurve(r.measured.gemm);
    if (!gemm) return gemm.error();
    sim::CalibrationFits& fits = r.fits;
    fits.name = cpuProfileName();
    fits.memory_bytes = core::physicalMemoryBytes();
    fits.gemm = *gemm;
    // The largest buffer: streaming from DRAM, the conservative figure (docs/calibration.md).
    fits.memory_bytes_per_s = r.measured.memory.back().bytesPerSecond();
    if (!r.measured.collectives.empty()) {
        auto coll = sim::fitCollectiveCurve(r.measured.collectives);
        if (!coll) {
            const auto& load = r.measured.load_at_start;
            return core::makeError(coll.error().message +
                                   (load ? fmt::format(" (load average {:.1f} on {} cores at the start)", load->load_1min,
                                                       load->cores)
                                         : std::string()) +
                                   ": other processes on the cores scatter the timings; re-run on an idle machine, "
                                   "without --quick for larger messages");
        }
        fits.collectives = *coll;
    }
    fits.source = fmt::format(
        "calibrated by `shardcast calibrate --backend cpu{}` on {} at {} with {} MPI rank(s): Eigen {}.{}.{} fp32 "
        "GEMM (C.noalias() = A * B, {} thread per rank, SIMD {}), memcpy over {} MiB, {}",
        options.quick ? " --quick" : "", fits.name.substr(4), core::utcNow(), world, EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
        EIGEN_MINOR_VERSION, r.measured.eigen_threads, r.measured.simd, sizes.memory_bytes.back() >> 20,
        fits.collectives ? "MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce of fp32, waited for with MPI_Test and "
                           "backoff, from a communication thread "
                           "(lower quartile of the slowest rank's times)"
                         : "collectives not measured (world of 1 rank)");

    core::ClusterSpec cluster;
    cluster.gpu = hostSpec();
    cluster.nodes = 1;
    cluster.gpus_per_node = world;
    sim::HardwareProfile base = sim::HardwareProfile::fromCluster(cluster);
    const double copy_bytes_per_s = fits.memory_bytes_per_s / 2;  // a copy reads and writes each byte
    // Without a fit the collective fields describe a shared-memory transport that copies each byte
    // once, with no latency: placeholders for plans of one rank, which run no collective.
    base.gpu.nvlink_bytes_per_s = copy_bytes_per_s;
    base.nvlink_all_gather_efficiency = base.nvlink_reduce_scatter_efficiency = base.nvlink_all_reduce_efficiency = 1.0;
    base.busbw_half_bytes = 0;
    base.gpu.intra_node_latency_s = 0;
    r.profile = sim::calibratedProfile(fits, base);
    // One node: nothing crosses a network. Plans of several "nodes" get the intra-node figures.
    r.profile.gpu.network_bytes_per_s = r.profile.gpu.nvlink_bytes_per_s;
    r.profile.network_efficiency = 1.0;
    r.profile.gpu.inter_node_latency_s = r.profile.gpu.intra_node_latency_s;
    // Host copies (offload) are memcpys in host memory; the CPU optimizer streams its bytes.
    r.profile.gpu.host_link_bytes_per_s = copy_bytes_per_s;
    r.profile.host_link_efficiency = 1.0;
    r.profile.cpu_optimizer_bytes_per_s = fits.memory_bytes_per_s;
    // No PyTorch dispatch or FSDP hooks run on the CPU backend.
    r.profile.task_launch_ns = 0;
    r.profile.unit_hook_ns = 0;
    // The rates are one rank's with a core to itself: the simulator shares the node's cores.
    r.profile.host_cores = r.measured.cores;
    if (r.measured.overlap) {
        // Contention both ways, each at least 1 (nothing runs faster than alone).
        r.profile.overlap_compute_slowdown = std::max(1.0, r.measured.overlap->computeSlowdown());
        r.profile.overlap_collective_slowdown = std::max(1.0, r.measured.overlap->collectiveSlowdown());
    }

    r.notes.push_back("peak_flops_bf16/fp16/tf32 = the measured fp32 rate: the CPU backend computes in fp32 "
                      "whatever the plan's dtype");
    r.notes.push_back("task_launch_ns and unit_hook_ns are 0 (no PyTorch dispatch); network figures = the "
                      "intra-node ones (one node); hbm_bytes_per_s = memcpy bytes read + written per second");
    r.notes.push_back(fmt::format("the profile describes {} rank(s) on this machine: calibrate with as many ranks "
                                  "as `shardcast run` will use (they share the cores)",
                                  world));
    r.notes.push_back(fmt::format(
        "host_cores {}: GEMMs and copies were measured {}, so their rates are one rank's with a core to itself; the "
        "simulator shares the {} cores among the ranks that compute at once",
        r.measured.cores,
        r.measured.turns > 1 ? fmt::format("by {} ranks at a time ({} turns)", r.measured.cores, r.measured.turns)
                             : std::string("by every rank at once (no more ranks than cores)"),
        r.measured.cores));
    if (r.measured.overlap) {
        r.notes.push_back(fmt::format(
            "overlap: a GEMM under an all-gather ran {:.2f}x as long (overlap_compute_slowdown {:.3f}), the "
            "all-gather under the GEMM {:.2f}x as long (overlap_collective_slowdown {:.3f}); each at least 1, "
            "measured with one GEMM shape and one message size",
            r.measured.overlap->computeSlowdown(), r.profile.overlap_compute_slowdown,
            r.measured.overlap->collectiveSlowdown(), r.profile.overlap_collective_slowdown));
    } else {
        r.notes.push_back(fmt::format(
            "collectives not measured: this world has 1 rank; run `scripts/mpirun.sh -np N shardcast calibrate "
            "--backend cpu` (N >= 2) to measure them. The collective fields are placeholders (nvlink_bytes_per_s = "
            "memcpy bytes/s / 2, efficiencies 1, busbw_half_bytes 0, latency 0) and the overlap slowdowns "
            "keep their defaults ({:g} for compute): fit for one-rank plans only",
            r.profile.overlap_compute_slowdown));
    }
    // The curves have three to five parameters for tens of points: a large misfit means scattered
    // timings (another process on the cores), not a curve that needs more terms.
    constexpr double kScatteredFit = 0.25;
    if (fits.gemm.rms_relative_error > kScatteredFit) {
        r.notes.push_back(fmt::format("the GEMM fit misses the measured times by {:.0f}% rms: the timings were "
                                      "scattered; re-run on an idle machine",
                                      fits.gemm.rms_relative_error * 100));
    }
    if (fits.collectives && fits.collectives->rms_relative_error > kScatteredFit) {
        r.notes.push_back(fmt::format("the collective fit misses the measured times by {:.0f}% rms: the timings were "
                                      "scattered; re-run on an idle machine",
                                      fits.collectives->rms_relative_error * 100));
    }
    if (const auto& load = r.measured.load_at_start; load && load->busy()) {
        r.notes.push_back(fmt::format("the machine was busy when calibration began (load average {:.1f} on {} cores): "
                                      "other processes slowed and scattered the timings; calibrate on an idle machine",
                                      load->load_1min, load->cores));
    }
    // The profile must be one the simulator loads: the JSON round trip is the file's contract.
    auto back = sim::profileFromJson(sim::profileToJson(r.profile), "calibrated profile", base);
    if (!back) return back.error();
    if (!(*back == r.profile)) return core::makeError("calibrated profile does not survive its JSON round trip");
    return r;
}

}  // namespace shardcast::cpu
