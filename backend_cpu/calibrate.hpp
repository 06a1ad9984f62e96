#pragma once
// Calibration of the CPU backend (DESIGN.md section 6): microbenchmarks of what the backend runs
// (Eigen fp32 GEMMs on one thread per rank, memcpy traffic, MPI collectives issued from their own
// thread on MPI_THREAD_MULTIPLE, and the two at once), fitted to the simulator's cost curves and
// written as a hardware profile (docs/calibration.md says which field means what on a CPU).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"
#include "measured/calibration_fit.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cpu {

class MpiSession;

struct CalibrationOptions {
    bool quick = false;  // fewer and smaller shapes, collectives up to 16 MiB (a test-sized run)
    // Rank 0 only: called after each measured point with (points done, points in all, what).
    std::function<void(int, int, std::string_view)> progress;
};

// memcpy of `buffer_bytes`; traffic = bytes read + written (2 x buffer), the unit of the
// profile's hbm_bytes_per_s and of the lowering's hbm_bytes.
struct MemoryPoint {
    int64_t buffer_bytes = 0;
    int64_t traffic_bytes = 0;
    double seconds = 0;
    double bytesPerSecond() const { return static_cast<double>(traffic_bytes) / seconds; }
};

// One GEMM on the compute thread while an all-gather loop runs on the communication thread of
// every rank, against each alone: what the profile's overlap_compute_slowdown stands for.
struct OverlapPoint {
    int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
    int64_t all_gather_bytes = 0;
    double gemm_alone_s = 0, gemm_overlapped_s = 0;
    double all_gather_alone_s = 0, all_gather_overlapped_s = 0;
    double computeSlowdown() const { return gemm_overlapped_s / gemm_alone_s; }
    double collectiveSlowdown() const { return all_gather_overlapped_s / all_gather_alone_s; }
};

// The host's 1-minute load average (/proc/loadavg) and online cores. Other processes' load slows
// and scatters every timing: a busy host gives a profile of the host under that load.
struct HostLoad {
    double load_1min = 0;
    int cores = 1;
    bool busy() const { return load_1min > 0.5 * cores; }
};
std::optional<HostLoad> hostLoad();  // nullopt where /proc/loadavg cannot be read

struct CalibrationMeasurements {
    int world_size = 1;
    int eigen_threads = 1;  // threads per GEMM (one: each rank's compute stream is one thread)
    std::string simd;       // Eigen::SimdInstructionSetsInUse()
    std::vector<sim::GemmPoint> gemm;               // lower quartile per shape, slowest rank
    std::vector<MemoryPoint> memory;                // lower quartile per size, slowest rank
    std::vector<sim::CollectivePoint> collectives;  // lower quartile per op/size/group, slowest rank
    std::optional<OverlapPoint> overlap;            // world of 2+ ranks only
    std::optional<HostLoad> load_at_start;          // rank 0's, before the first measurement
    int cores = 1;  // rank 0's node's (core::hostCores)
    int turns = 1;  // the GEMMs and copies measured by a node's ranks in turns of at most `cores`
};

struct CalibrationResult {
    CalibrationMeasurements measured;
    sim::CalibrationFits fits;
    sim::HardwareProfile profile;
    std::vector<std::string> notes;  // what was not measured and what the profile holds instead
};

// Collective over MPI_COMM_WORLD: every rank calls it. Rank 0 returns the measurements, fits and
// profile (or an error when a fit fails); other ranks return an empty result once their part is
// done. A failed MPI call throws std::runtime_error naming the call and the rank: the other ranks
// may be waiting in a collective, so the caller ends them all (MpiSession::abort).
core::Result<CalibrationResult> calibrateCpu(const MpiSession& session, const CalibrationOptions& options);

// The profile's GPU name for this host, "cpu-<hostname>".
std::string cpuProfileName();

}  // namespace shardcast::cpu
