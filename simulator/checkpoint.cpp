#include "simulator/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/lower/lifecycle.hpp"
#include "core/memory/memory.hpp"
#include "simulator/cost_model.hpp"

namespace shardcast::sim {

double checkpointGoodput(double interval_s, double save_s, double restart_s, double mtbf_s) {
    if (!(interval_s > 0)) return 0;
    const double segment = interval_s + save_s;
    const double lost = std::isfinite(mtbf_s) ? (segment + 2 * restart_s) / (2 * mtbf_s) : 0;
    return interval_s / (segment * (1 + lost));
}

double youngInterval(double save_s, double mtbf_s) {
    if (!std::isfinite(mtbf_s)) return std::numeric_limits<double>::infinity();
    return std::sqrt(2 * save_s * mtbf_s);
}

double gatherUnitsSeconds(const core::Plan& plan, const core::Program& program, const HardwareProfile& profile,
                          int64_t (*bytes_of)(const core::UnitInfo&, int64_t item, int states)) {
    const int64_t item = core::itemSize(plan.training.master_dtype);
    const int states = core::optimizerStatesPerParam(plan.training.optimizer);
    const int tp = std::max(1, plan.sharding.tp), pp = std::max(1, plan.sharding.pp);
    const CostModel cost(profile);
    const core::ProcessGroup* shard = nullptr;
    for (const core::ProcessGroup& g : program.groups) {
        if (g.kind == core::GroupKind::Shard && g.size > 1) shard = &g;
    }
    double s = 0;
    for (const core::UnitInfo& u : program.units) {
        const int64_t bytes = bytes_of(u, item, states);
        if (shard != nullptr) s += cost.collectiveSeconds(core::TaskKind::AllGather, bytes, shard->size, shard->nodes);
        if (tp > 1) s += cost.collectiveSeconds(core::TaskKind::AllGather, bytes * tp, tp, 1);
    }
    return s * pp;
}

CheckpointFigures checkpointFigures(const core::Plan& plan, const core::Program& program, const HardwareProfile& profile,
                                    double step_s, int64_t budget_bytes) {
    const core::CheckpointSpec& k = plan.checkpoint;
    const core::ClusterSpec& c = plan.cluster;
    CheckpointFigures f;
    f.mode = k.mode;
    f.every_steps = k.every_steps;
    f.budget_bytes = budget_bytes;
    const int world = std::max(1, c.worldSize());
    const core::LifecycleMemory m = core::lifecycleMemory(plan, program);  // rules L3, L4
    f.model_bytes = m.model_bytes;
    f.optimizer_bytes = m.optimizer_bytes;
    const int64_t total = f.model_bytes + f.optimizer_bytes;
    const double host_link = profile.gpu.host_link_bytes_per_s;
    const double storage = c.storage_bytes_per_s_per_node;
    if (k.mode == core::CheckpointMode::Full) {
        f.rank0_peak_bytes = m.full_save_rank0_bytes;
        f.rank0_host_bytes = m.full_save_rank0_host_bytes;
        f.node_host_bytes = m.full_save_node_host_bytes;
        // The gathers: each unit's model and optimizer bytes.
        f.gather_s = gatherUnitsSeconds(plan, program, profile, [](const core::UnitInfo& u, int64_t it, int st) {
            return (u.params + u.trainable_params * st) * it;
        });
        f.to_host_s = k.offload_to_cpu && host_link > 0 ? static_cast<double>(total) / host_link : 0;
        f.write_s = static_cast<double>(total) / storage;
    } else {
        f.rank0_peak_bytes = core::total(program.initial);
        f.per_rank_bytes = m.sharded_save_per_rank_bytes;
        f.to_host_s = host_link > 0 ? static_cast<double>(f.per_rank_bytes) / host_link : 0;
        f.write_s = static_cast<double>(f.per_rank_bytes) * std::min(c.gpus_per_node, world) / storage;
    }
    f.rank0_fits = f.rank0_peak_bytes <= budget_bytes;
    f.save_s = f.gather_s + f.to_host_s + f.write_s;
    f.restart_s = f.write_s;

    f.step_s = step_s;
    f.interval_s = static_cast<double>(k.every_steps) * step_s;
    const double failures_per_s = c.failures_per_gpu_hour * world / 3600.0;
    f.mtbf_s = failures_per_s > 0 ? 1.0 / failures_per_s : std::numeric_limits<double>::infinity();
    f.goodput = checkpointGoodput(f.interval_s, f.save_s, f.restart_s, f.mtbf_s);
    // The best whole number of steps around Young's interval (the better of the two around it).
    const double young = youngInterval(f.save_s, f.mtbf_s);
    if (step_s > 0 && std::isfinite(young)) {
        const double steps = young / step_s;
        const auto lo = static_cast<int64_t>(std::clamp(std::floor(steps), 1.0, 1e8));
        const auto hi = static_cast<int64_t>(std::clamp(std::ceil(steps), 1.0, 1e8));
        const double g_lo = checkpointGoodput(static_cast<double>(lo) * step_s, f.save_s, f.restart_s, f.mtbf_s);
        const double g_hi = checkpointGoodput(static_cast<double>(hi) * step_s, f.save_s, f.restart_s, f.mtbf_s);
        f.best_every_steps = g_hi > g_lo ? hi : lo;
        f.best_goodput = std::max(g_lo, g_hi);
    } else {
        f.best_every_steps = k.every_steps;
        f.best_goodput = f.goodput;
    }
    return f;
}

}  // namespace shardcast::sim
