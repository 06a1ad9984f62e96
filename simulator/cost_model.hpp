#pragma once
// Uncontended durations of tasks (DESIGN.md section 4). Overlap contention is applied by the
// simulator's event loop, which knows what runs at the same time.
#include <cstdint>

#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// 1e9 s: 1e18 ns, a factor 9 below INT64_MAX.
inline constexpr double kMaxStepSeconds = 1e9;

// std::llround (halves away from zero), exact for |x| < 2^63, inlined: the simulator rounds every
// duration and every rescheduled end, and the libm call showed in profiles.
inline int64_t roundToInt64(double x) {
    const double a = x < 0 ? -x : x;
    const auto whole = static_cast<int64_t>(a);              // truncates; a - whole is exact
    const int64_t r = whole + (a - static_cast<double>(whole) >= 0.5 ? 1 : 0);
    return x < 0 ? -r : r;
}

// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw * factor.
double busBandwidthFactor(core::TaskKind kind, int group_size);

class CostModel {
public:
    explicit CostModel(const HardwareProfile& profile) : m_profile(&profile) {}

    // Duration in ns of `task` of `program` running alone; 0 for empty work and groups of one rank.
    // Reads only the task's kind, stream, flops, hbm_bytes, comm_bytes, group_size, group_nodes
    // and ops (span and the kernels in it): the Simulator reuses a duration for a task whose fields
    // are the same (keep the two in step).
    int64_t durationNs(const core::Task& task, const core::Program& program) const;
    double durationSeconds(const core::Task& task, const core::Program& program) const;

    // A compute task: the sum of its kernels' times (opSeconds); a task without kernels as a whole.
    double computeSeconds(const core::Task& task, const core::Program& program) const;
    // The sum of a compute task's kernels, tensor-parallel collectives included; under async TP an
    // overlapped collective adds only what its GEMMs do not cover. `tp_exposed` (optional): the
    // seconds of tensor-parallel collectives the task's time holds.
    double kernelSeconds(const core::Task& task, const core::Program& program, double* tp_exposed) const;
    // One kernel of a task of `kind` (Backward GEMMs use backward_efficiency_max), launch included.
    double opSeconds(const core::OpShape& op, core::TaskKind kind) const;
    // A GEMM's shape factor (<= 1): tile quantisation on 128 x 256 output tiles, wave quantisation
    // over the GPU's SMs, and the k ramp k / (k + 128) of a tile's fixed prologue and epilogue.
    double gemmShapeEfficiency(int64_t m, int64_t n, int64_t k, int64_t batch) const;
    double collectiveSeconds(core::TaskKind kind, int64_t bytes, int group_size, int group_nodes) const;
    double busBandwidthMax(core::TaskKind kind, int group_size, int group_nodes) const;  // bytes/s
    // A pipeline send or receive of `bytes` between two GPUs (nodes 1: inside a node; 2: across).
    double p2pSeconds(int64_t bytes, int nodes) const;
    double busBandwidth(core::TaskKind kind, int64_t bytes, int group_size, int group_nodes) const;
    // Compute tasks (the ones overlap contention slows down).
    static bool slowedByOverlap(const core::Task& task) {
        return !core::isCollective(task.kind) &&
               (task.stream == core::Stream::Compute || task.stream == core::Stream::AllGatherCopyIn);
    }

    // Ranks sharing CPU cores (HardwareProfile::host_cores): a kernel's and a task's CPU work takes
    // `slowdown` (>= 1) times its time with a core to itself. Tensor-parallel collectives, the
    // other collectives and transfers are waits, not CPU work: they keep their times. Default 1.
    void setCoreSlowdown(double slowdown) { m_core_slowdown = slowdown; }
    double coreSlowdown() const { return m_core_slowdown; }

private:
    const HardwareProfile* m_profile;
    double m_core_slowdown = 1.0;
};

// An error when a step's upper bound (Simulator::stepBoundSeconds) is beyond kMaxStepSeconds, so
// that no simulated time leaves int64 nanoseconds; the message names the figures to check.
core::Status checkStepBound(double bound_s);

}  // namespace shardcast::sim
