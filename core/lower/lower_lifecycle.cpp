// FSDP's memory around the training step: rules L1-L4 (core/lower/lifecycle.hpp).
#include "core/lower/lifecycle.hpp"

#include <algorithm>
#include <cmath>

#include "core/memory/memory.hpp"

namespace shardcast::core {

LifecycleMemory lifecycleMemory(const Plan& plan, const Program& program) {
    LifecycleMemory m;
    const int64_t item = itemSize(plan.training.master_dtype);
    const int64_t tp = std::max(1, plan.sharding.tp);
    const int64_t sharded = program.initial[index(MemCategory::ShardedParam)];
    const int64_t overhead = program.initial[index(MemCategory::RuntimeOverhead)];
    const int64_t steady = total(program.initial);

    // L1, L2: a unit's params are the rank's tp-local share: whole, they are tp times that.
    int64_t largest_shard = 0, unit_params = 0, unit_trainable = 0;
    for (const UnitInfo& u : program.units) {
        const int64_t whole = u.params * tp * item;
        m.stage_param_bytes += whole;
        m.largest_unit_bytes = std::max(m.largest_unit_bytes, whole);
        largest_shard = std::max(largest_shard, u.sharded_bytes);
        unit_params += u.params;
        unit_trainable += u.trainable_params;
    }
    m.init_meta_bytes = sharded + overhead;
    m.init_materialized_bytes = m.stage_param_bytes + largest_shard + overhead;
    m.summon_bytes = steady + m.stage_param_bytes;
    m.summon_offload_bytes = steady + m.largest_unit_bytes;
    m.summon_host_bytes = m.stage_param_bytes;

    // L3, L4: the whole model's state (every parameter in the master dtype) and the optimizer's
    // states of the trainable ones (their share in the rank's Program: the frozen pattern applies
    // alike across the model).
    int64_t params = 0, largest_param = 0;
    for (const Param& p : plan.model->params) {
        params += p.numel();
        largest_param = std::max(largest_param, p.numel());
    }
    const double trainable = unit_params > 0 ? static_cast<double>(unit_trainable) / static_cast<double>(unit_params) : 1.0;
    const int states = optimizerStatesPerParam(plan.training.optimizer);
    m.model_bytes = params * item;
    m.optimizer_bytes = std::llround(static_cast<double>(params) * trainable) * states * item;
    const int64_t state = m.model_bytes + m.optimizer_bytes;
    const CheckpointSpec& k = plan.checkpoint;
    const int64_t world = std::max(1, plan.cluster.worldSize());
    // What is gathered at once: FSDP1 a unit's FlatParameter (gathered whole over the tp ranks
    // too), FSDP2 one tensor.
    const int64_t piece = (plan.sharding.fsdp_version == 1 ? m.largest_unit_bytes / item : largest_param) * item;
    m.full_save_rank0_bytes = steady + (k.offload_to_cpu ? piece : state);
    m.full_save_rank0_host_bytes = k.offload_to_cpu ? state : 0;
    m.full_save_node_host_bytes =
        k.offload_to_cpu ? state * (k.rank0_only ? 1 : std::min<int64_t>(plan.cluster.gpus_per_node, world)) : 0;
    m.sharded_save_per_rank_bytes = (state + world - 1) / world;
    return m;
}

}  // namespace shardcast::core
