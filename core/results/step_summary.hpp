#pragma once
// The per-step figures a user reads first (DESIGN.md section 4): step time, where it goes, MFU,
// throughput and the timed memory peak.
#include <array>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/units.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"

namespace shardcast::core {

struct UnitTime {
    int64_t compute_ns = 0;         // forward, backward, recompute, copy-in/out, casts, optimizer
    int64_t all_gather_ns = 0;
    int64_t reduce_scatter_ns = 0;
    int64_t all_reduce_ns = 0;
    int64_t host_copy_ns = 0;       // H2D + D2H
    bool operator==(const UnitTime&) const = default;
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
    double peak_flops = 0;          // the dense peak MFU and HFU are taken against (FLOP/s)
    int64_t peak_bytes = 0;         // from the timed memory curve
    int32_t peak_task = -1;
    CategoryBytes at_peak{};
    std::array<double, kStreamCount> stream_busy_s{};
    std::vector<UnitTime> units;    // per Program::units; step-level tasks are not attributed
    bool operator==(const StepSummary&) const = default;
};

// The FLOP conventions behind MFU and HFU, one line each, as reports print them. With flash
// attention and no recompute HFU can read below MFU: the MFU convention counts the whole s x s
// attention product and no flash recompute (12 L h s per token), the kernels run the causal half
// and recompute Q K^T in backward (7 L h s).
inline constexpr const char* kMfuConvention =
    "MFU: torchtitan's model FLOPs, 6 * (params - embedding params) + 12 * layers * heads * head_dim * seq "
    "per token; attention counted in full (no causal halving), no recompute";
inline constexpr const char* kHfuConvention =
    "HFU: FLOPs executed, recompute included; causal flash attention does half the s^2 work, its backward "
    "2.5x its forward; eager attention computes the full s x s";

// The step's time totals its scalar figures derive from (summarizeStep). A step simulated by its
// period (sim::Evaluator) extrapolates these, then sets the figures from them.
struct StepTotals {
    int64_t step_ns = 0;
    std::array<int64_t, kStreamCount> stream_busy_ns{};
    int64_t all_gather_ns = 0, reduce_scatter_ns = 0, all_reduce_ns = 0;
    bool operator==(const StepTotals&) const = default;
};
StepTotals stepTotals(const Program& program, const Timeline& timeline);
// The time figures of `out` (step, compute, exposed, per collective, per stream, MFU, HFU,
// throughput) from `totals`, the step's FLOPs per rank and its tokens per rank.
void setStepFigures(const StepTotals& totals, double model_flops, double hardware_flops, double tokens,
                    double peak_flops, StepSummary& out);

// `peak_flops` is the GPU's dense peak in the Program's compute dtype (the denominator of MFU and HFU),
// from the hardware profile that timed the step or the GPU that ran it.
StepSummary summarize(const Program& program, const Timeline& timeline, const TimedMemory& memory,
                      double peak_flops);
// Fills the scalar fields only (no per-unit vector): cheap enough for sweeps.
void summarizeStep(const Program& program, const Timeline& timeline, const TimedMemory& memory,
                   double peak_flops, StepSummary& out, bool per_unit = true);

// The summary as `shardcast simulate --json` prints it: tasks and units by name.
nlohmann::json summaryReportJson(const Program& program, const StepSummary& s);

// Collective payload per rank per step: the sum of Task::comm_bytes by collective kind.
struct CommTotals {
    int64_t all_gather_bytes = 0;
    int64_t reduce_scatter_bytes = 0;
    int64_t all_reduce_bytes = 0;
    // An all-reduce moves its buffer twice (reduce-scatter + all-gather), hence the factor 2.
    int64_t volumeBytes() const { return all_gather_bytes + reduce_scatter_bytes + 2 * all_reduce_bytes; }
    bool operator==(const CommTotals&) const = default;
};
CommTotals communicationTotals(const Program& program);

}  // namespace shardcast::core
