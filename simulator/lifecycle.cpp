#include "simulator/lifecycle.hpp"

#include <algorithm>

#include "core/memory/memory.hpp"
#include "simulator/checkpoint.hpp"

namespace shardcast::sim {

namespace {

// The eval step of lifecycle.hpp: micro-batch 0 up to its last forward task, Activation transient.
void evalStep(const core::Program& program, const core::Timeline& timeline, LifecycleFigures& f) {
    int32_t last_forward = -1;
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch == 0 && t.kind == core::TaskKind::Forward) last_forward = id;
    }
    if (last_forward < 0) return;
    const auto activation = core::index(core::MemCategory::Activation);
    int64_t cur = core::total(program.initial);
    int64_t peak = cur;
    // Events other than Activation change the state. A task's Activation allocations (what training
    // keeps for backward) are alive while it runs, its outputs and the loss's logits, and gone after it:
    // nothing is kept for backward. Returns the Activation bytes and the other bytes the span adds.
    auto apply = [&](core::Span span, bool transient) {
        std::pair<int64_t, int64_t> added{0, 0};
        for (uint32_t i = 0; i < span.count; ++i) {
            const core::MemEvent& e = program.mem[span.offset + i];
            if (core::index(e.category) == activation) {
                added.first += e.bytes;
                continue;
            }
            added.second += e.bytes;
            if (!transient) {
                cur += e.bytes;
                peak = std::max(peak, cur);
            }
        }
        return added;
    };
    for (int32_t id = 0; id <= last_forward; ++id) {
        const core::Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch != 0) continue;
        const int64_t at_start = std::max<int64_t>(0, apply(t.mem_start, false).first);
        const auto [act_transient, other_transient] = apply(t.mem_peak, true);
        peak = std::max(peak, cur + at_start + std::max<int64_t>(0, act_transient + other_transient));
        const int64_t at_end = std::max<int64_t>(0, apply(t.mem_end, false).first);
        peak = std::max(peak, cur + at_start + at_end);
    }
    f.eval_modelled = true;
    f.eval_peak_bytes = peak;
    f.eval_fits = peak <= f.budget_bytes;
    if (timeline.tasks.size() == program.tasks.size()) f.eval_ns = timeline.tasks[static_cast<size_t>(last_forward)].end_ns;
}

}  // namespace

LifecycleFigures lifecycleFigures(const core::Plan& plan, const core::Program& program, const core::Timeline& timeline,
                                  const HardwareProfile& profile, int64_t budget_bytes) {
    LifecycleFigures f;
    f.budget_bytes = budget_bytes;
    const int64_t item = core::itemSize(plan.training.master_dtype);
    const int64_t tp = std::max(1, plan.sharding.tp);
    const int64_t sharded = program.initial[core::index(core::MemCategory::ShardedParam)];
    const int64_t overhead = program.initial[core::index(core::MemCategory::RuntimeOverhead)];
    const int64_t steady = core::total(program.initial);
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
    if (std::max(1, plan.sharding.pp) == 1) evalStep(program, timeline, f);
    return f;
}

}  // namespace shardcast::sim
