#pragma once
// Every number the cost models use (DESIGN.md section 4): the GPU's data-sheet figures plus
// efficiency curves, overheads and contention. Built from a ClusterSpec with documented defaults
// (hardware_profile.cpp cites each one) and overridable from a JSON profile file.
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/base/units.hpp"
#include "core/plan/cluster.hpp"

namespace shardcast::sim {

// The only place the simulator and the reports read GPU figures from: capacity, peak FLOP/s (the MFU
// label and its denominator), bandwidths and the runtime overhead the lowering charges. The cluster's
// shape (nodes, GPUs per node) belongs to the plan.
struct HardwareProfile {
    core::GpuSpec gpu;

    // Compute, op by op (CostModel::opSeconds): a GEMM runs at peak * gpu.computeClockScale() *
    // eff_max * its shape factors (tile and wave quantisation, k ramp), an attention kernel at its
    // matmul FLOPs / (clocked peak * attention efficiency) plus its exponentials and FP32 work, an
    // elementwise kernel at its bytes / (hbm_bytes_per_s * hbm_efficiency); each kernel also costs
    // kernel_launch_ns. eff_max: forward_efficiency_max for forward and recompute GEMMs,
    // backward_efficiency_max for backward ones (1: the clocked peak, whose gap to the data sheet
    // the GPU's sustained clock carries; a calibrated profile measures them).
    // A task without ops (hand-built programs) is timed as a whole: eff(f) = eff_max * f /
    // (f + gemm_half_flops), time = flops / (peak * eff) + hbm_bytes / (hbm bandwidth).
    double forward_efficiency_max = 0;
    double backward_efficiency_max = 0;
    double gemm_half_flops = 0;   // FLOPs at which a task without ops reaches half of eff_max
    double hbm_efficiency = 0;    // memory-bound kernels (copy-in/out, casts, optimizer) and rooflines
    // Flash attention's tensor-core work relative to the clocked peak, forward and backward.
    double attention_forward_efficiency = 0;
    double attention_backward_efficiency = 0;
    int64_t kernel_launch_ns = 0;  // per kernel on the GPU's timeline (eager: one per op)

    // Collectives: t = latency + S * factor / busbw(S), busbw(S) = busbw_max * S / (S + half_bytes).
    double nvlink_all_gather_efficiency = 0;      // busbw_max / nvlink_bytes_per_s
    double nvlink_reduce_scatter_efficiency = 0;
    double nvlink_all_reduce_efficiency = 0;
    double network_efficiency = 0;                // busbw_max / (network_bytes_per_s * GPUs per node in the group)
    double busbw_half_bytes = 0;                  // S at which busbw reaches half its maximum

    // Host link (CPU offload) and the CPU optimizer.
    double host_link_efficiency = 0;
    double cpu_optimizer_bytes_per_s = 0;         // an optimizer task's hbm_bytes processed per second on the CPU

    // Overlap: compute kernels run overlap_compute_slowdown times slower while any collective runs,
    // and collectives overlap_collective_slowdown times slower while any compute kernel runs (both
    // at least 1; 1 = no contention that way).
    double overlap_compute_slowdown = 0;
    double overlap_collective_slowdown = 1;

    // Host issue: each task costs launch time; each unit's first task of a pass (forward or
    // backward of one micro-batch) also costs its FSDP hooks.
    int64_t task_launch_ns = 0;
    int64_t unit_hook_ns = 0;

    // Ranks that compute on a host's CPU cores (the CPU backend; a calibrated CPU profile): the
    // cores one node's ranks share, 0 when each rank has a device of its own (GPUs). The rates
    // above are then one rank's with a core to itself; when more of a node's ranks compute at once
    // than it has cores, each gets its share (processor sharing, coreSlowdowns in pipeline.hpp).
    int64_t host_cores = 0;

    static HardwareProfile fromCluster(const core::ClusterSpec& cluster);
    bool operator==(const HardwareProfile&) const = default;
    double peakFlops(core::DType compute) const { return gpu.peakFlops(compute); }
};

// Compute slowdown while a collective runs, from the SMs NCCL holds (hardware_profile.cpp).
double overlapComputeSlowdown(const core::GpuSpec& gpu);

// Applies a profile JSON object over `base`: keys as the fields above, plus "gpu" (an object of
// GPU keys as in core::gpuFromJson, merged over base.gpu). Unknown keys are errors naming the key.
core::Result<HardwareProfile> profileFromJson(const nlohmann::json& j, const std::string& where,
                                              const HardwareProfile& base);
nlohmann::json profileToJson(const HardwareProfile& profile);
core::Result<HardwareProfile> loadProfile(const std::filesystem::path& path, const HardwareProfile& base);
core::Status saveProfile(const std::filesystem::path& path, const HardwareProfile& profile);
// The defaults for `cluster`'s GPU with `file` (if not empty) applied over them; errors name the file.
core::Result<HardwareProfile> resolveProfile(const core::ClusterSpec& cluster, const std::filesystem::path& file);

}  // namespace shardcast::sim
