#include "simulator/lifecycle.hpp"

#include <algorithm>

#include "core/lower/lifecycle.hpp"
#include "core/memory/memory.hpp"
#include "simulator/checkpoint.hpp"

namespace shardcast::sim {

LifecycleFigures lifecycleFigures(const core::Plan& plan, const core::Program& program, const core::Timeline& timeline,
                                  const HardwareProfile& profile, int64_t budget_bytes) {
    LifecycleFigures f;
    f.budget_bytes = budget_bytes;
    const core::LifecycleMemory m = core::lifecycleMemory(plan, program);  // rules L1, L2
    f.init_meta_bytes = m.init_meta_bytes;
    f.init_materialized_bytes = m.init_materialized_bytes;
    f.stage_param_bytes = m.stage_param_bytes;
    f.largest_unit_bytes = m.largest_unit_bytes;
    f.summon_bytes = m.summon_bytes;
    f.summon_offload_bytes = m.summon_offload_bytes;
    f.summon_host_bytes = m.summon_host_bytes;
    f.init_meta_fits = f.init_meta_bytes <= budget_bytes;
    f.init_materialized_fits = f.init_materialized_bytes <= budget_bytes;
    f.summon_fits = f.summon_bytes <= budget_bytes;
    f.summon_offload_fits = f.summon_offload_bytes <= budget_bytes;
    f.summon_gather_s = gatherUnitsSeconds(plan, program, profile, [](const core::UnitInfo& u, int64_t it, int) {
        return u.params * it;
    });
    const double host_link = profile.gpu.host_link_bytes_per_s;
    f.summon_to_host_s = host_link > 0 ? static_cast<double>(f.stage_param_bytes) / host_link : 0;
    if (std::max(1, plan.sharding.pp) == 1) {
        const core::EvalReplay eval = core::replayEvalStep(program);
        if (eval.last_forward_task >= 0) {
            f.eval_modelled = true;
            f.eval_peak_bytes = eval.peak_bytes;
            f.eval_fits = eval.peak_bytes <= budget_bytes;
            if (timeline.tasks.size() == program.tasks.size()) {
                f.eval_ns = timeline.tasks[static_cast<size_t>(eval.last_forward_task)].end_ns;
            }
        }
    }
    return f;
}

}  // namespace shardcast::sim
