#pragma once
// Uncontended durations of tasks (DESIGN.md section 4). Overlap contention is applied by the
// simulator's event loop, which knows what runs at the same time.
#include <cstdint>

#include "core/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw * factor.
double busBandwidthFactor(core::TaskKind kind, int group_size);

class CostModel {
public:
    explicit CostModel(const HardwareProfile& profile) : m_profile(&profile) {}

    // Duration in ns of `task` running alone; 0 for empty work and groups of one rank.
    int64_t durationNs(const core::Task& task, core::DType compute) const;

    double computeSeconds(const core::Task& task, core::DType compute) const;
    double collectiveSeconds(core::TaskKind kind, int64_t bytes, int group_size, int group_nodes) const;
    double busBandwidthMax(core::TaskKind kind, int group_size, int group_nodes) const;  // bytes/s
    double busBandwidth(core::TaskKind kind, int64_t bytes, int group_size, int group_nodes) const;
    // Compute tasks (the ones overlap contention slows down).
    static bool slowedByOverlap(const core::Task& task);

private:
    const HardwareProfile* m_profile;
};

}  // namespace shardcast::sim
