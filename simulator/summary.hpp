#pragma once
// The per-step figures a user reads first (DESIGN.md section 4): step time, where it goes, MFU,
// throughput and the timed memory peak.
#include <array>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/program.hpp"
#include "core/units.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/memory_curve.hpp"
#include "core/timeline.hpp"

namespace shardcast::sim {

struct UnitTime {
    int64_t compute_ns = 0;         // forward, backward, recompute, copy-in/out, casts, optimizer
    int64_t all_gather_ns = 0;
    int64_t reduce_scatter_ns = 0;
    int64_t all_reduce_ns = 0;
    int64_t host_copy_ns = 0;       // H2D + D2H
};

struct StepSummary {
    double step_s = 0;
    double compute_s = 0;           // busy time of the compute stream
    double exposed_comm_s = 0;      // step time the compute stream is idle (>= 0)
    double all_gather_s = 0;        // summed durations per collective kind
    double reduce_scatter_s = 0;
    double all_reduce_s = 0;
    double mfu = 0;                 // model FLOPs / (step * peak in the compute dtype)
    double hfu = 0;                 // hardware FLOPs (recompute included) / (step * peak)
    double tokens_per_s_per_gpu = 0;
    int64_t peak_bytes = 0;         // from the timed memory curve
    int32_t peak_task = -1;
    core::CategoryBytes at_peak{};
    std::array<double, core::kStreamCount> stream_busy_s{};
    std::vector<UnitTime> units;    // per Program::units; step-level tasks are not attributed
};

StepSummary summarize(const core::Program& program, const core::Timeline& timeline, const TimedMemory& memory,
                      const HardwareProfile& profile);
// Fills the scalar fields only (no per-unit vector): cheap enough for sweeps.
void summarizeStep(const core::Program& program, const core::Timeline& timeline, const TimedMemory& memory,
                   const HardwareProfile& profile, StepSummary& out, bool per_unit = true);

nlohmann::json summaryToJson(const core::Program& program, const StepSummary& s);

}  // namespace shardcast::sim
