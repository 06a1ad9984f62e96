#include "simulator/lifecycle.hpp"

#include <algorithm>

#include "simulator/checkpoint.hpp"

namespace shardcast::sim {

LifecycleFigures lifecycleFigures(const core::Plan& plan, const core::Program& program, const HardwareProfile& profile,
                                  int64_t budget_bytes) {
    LifecycleFigures f;
    f.budget_bytes = budget_bytes;
    const int64_t item = core::itemSize(plan.training.master_dtype);
    const int64_t tp = std::max(1, plan.sharding.tp);
    const int64_t sharded = program.initial[core::index(core::MemCategory::ShardedParam)];
    const int64_t overhead = program.initial[core::index(core::MemCategory::RuntimeOverhead)];
    int64_t steady = 0;
    for (const int64_t b : program.initial) steady += b;
    int64_t largest_shard = 0;
    for (const core::UnitInfo& u : program.units) {
        // A unit's params are the rank's tp-local share: whole, they are tp times that.
        const int64_t whole = u.params * tp * item;
        f.stage_param_bytes += whole;
        f.largest_unit_bytes = std::max(f.largest_unit_bytes, whole);
        largest_shard = std::max(largest_shard, u.sharded_bytes);
    }
    f.init_meta_bytes = sharded + overhead;
    f.init_materialized_bytes = f.stage_param_bytes + largest_shard + overhead;
    f.summon_bytes = steady + f.stage_param_bytes;
    f.summon_offload_bytes = steady + f.largest_unit_bytes;
    f.summon_host_bytes = f.stage_param_bytes;
    f.init_meta_fits = f.init_meta_bytes <= budget_bytes;
    f.init_materialized_fits = f.init_materialized_bytes <= budget_bytes;
    f.summon_fits = f.summon_bytes <= budget_bytes;
    f.summon_offload_fits = f.summon_offload_bytes <= budget_bytes;
    f.summon_gather_s = gatherUnitsSeconds(plan, program, profile, [](const core::UnitInfo& u, int64_t it, int) {
        return u.params * it;
    });
    const double host_link = profile.gpu.host_link_bytes_per_s;
    f.summon_to_host_s = host_link > 0 ? static_cast<double>(f.stage_param_bytes) / host_link : 0;
    return f;
}

}  // namespace shardcast::sim
