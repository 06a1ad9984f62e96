#include "simulator/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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
    const core::TrainingSpec& t = plan.training;
    CheckpointFigures f;
    f.mode = k.mode;
    f.every_steps = k.every_steps;
    f.budget_bytes = budget_bytes;
    const int64_t item = core::itemSize(t.master_dtype);
    const int states = core::optimizerStatesPerParam(t.optimizer);
    const int tp = std::max(1, plan.sharding.tp);
    const int world = std::max(1, c.worldSize());

    // The whole state: every parameter, and the optimizer's states of the trainable ones (their
    // share in the rank's Program: the frozen pattern applies alike across the model).
    int64_t params = 0, largest_param = 0;
    for (const core::Param& p : plan.model->params) {
        params += p.numel();
        largest_param = std::max(largest_param, p.numel());
    }
    int64_t unit_params = 0, unit_trainable = 0, largest_unit = 0;
    for (const core::UnitInfo& u : program.units) {
        unit_params += u.params;
        unit_trainable += u.trainable_params;
        largest_unit = std::max(largest_unit, u.params * tp);  // gathered whole over the tp ranks too
    }
    const double trainable = unit_params > 0 ? static_cast<double>(unit_trainable) / static_cast<double>(unit_params) : 1.0;
    f.model_bytes = params * item;
    f.optimizer_bytes = std::llround(static_cast<double>(params) * trainable) * states * item;
    const int64_t total = f.model_bytes + f.optimizer_bytes;

    int64_t initial = 0;
    for (int64_t b : program.initial) initial += b;
    const double host_link = profile.gpu.host_link_bytes_per_s;
    const double storage = c.storage_bytes_per_s_per_node;

    if (k.mode == core::CheckpointMode::Full) {
        // What is gathered at once: FSDP1 a unit's FlatParameter, FSDP2 one tensor.
        const int64_t piece = (plan.sharding.fsdp_version == 1 ? largest_unit : largest_param) * item;
        f.rank0_peak_bytes = initial + (k.offload_to_cpu ? piece : total);
        f.rank0_host_bytes = k.offload_to_cpu ? total : 0;
        f.node_host_bytes = k.offload_to_cpu ? total * (k.rank0_only ? 1 : std::min(c.gpus_per_node, world)) : 0;
        // The gathers: each unit's model and optimizer bytes.
        f.gather_s = gatherUnitsSeconds(plan, program, profile, [](const core::UnitInfo& u, int64_t it, int st) {
            return (u.params + u.trainable_params * st) * it;
        });
        f.to_host_s = k.offload_to_cpu && host_link > 0 ? static_cast<double>(total) / host_link : 0;
        f.write_s = static_cast<double>(total) / storage;
    } else {
        f.rank0_peak_bytes = initial;
        f.per_rank_bytes = (total + world - 1) / world;
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
