#pragma once
// The plan report: a readable text form and the JSON of `shardcast plan --json`. Both are built
// from the same inputs (Plan, Mesh, Program, MemoryReport) so every front-end shows one truth.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/memory.hpp"
#include "core/plan.hpp"
#include "core/program.hpp"
#include "simulator/summary.hpp"

namespace shardcast::cli {

// Collective payload per rank per step: the sum of Task::comm_bytes by collective kind.
struct CommTotals {
    int64_t all_gather_bytes = 0;
    int64_t reduce_scatter_bytes = 0;
    int64_t all_reduce_bytes = 0;
    // An all-reduce moves its buffer twice (reduce-scatter + all-gather), hence the factor 2.
    int64_t volumeBytes() const { return all_gather_bytes + reduce_scatter_bytes + 2 * all_reduce_bytes; }
};
CommTotals communicationTotals(const core::Program& program);

// `memory` holds the peak of the timed memory curve when `time` is set (the simulator placed
// the allocations at their simulated times); `issue_order_peak_bytes` is the allocator's view
// in host issue order (core::replayMemory), which is what torch.cuda.max_memory_allocated sees
// when the host runs ahead.
struct PlanResultView {
    const core::Plan& plan;
    const core::Mesh& mesh;
    const core::Program& program;
    const core::MemoryReport& memory;
    const sim::StepSummary* time = nullptr;
    int64_t issue_order_peak_bytes = 0;
};

// Keys documented in README.md ("shardcast plan --json"); insertion-ordered for reading.
nlohmann::ordered_json planResultJson(const PlanResultView& r);
std::string planReportText(const PlanResultView& r);

}  // namespace shardcast::cli
