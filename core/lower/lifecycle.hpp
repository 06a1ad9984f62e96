#pragma once
// FSDP's memory around the training step (issue 26): the rules of what a rank's device holds when
// the model is made, when summon_full_params unshards it whole, and when a checkpoint is saved.
// They live here, beside the lowering's rules for the step, and read the rank's Program (its units
// and steady state, Program::initial); the simulator adds the time and the goodput
// (simulator/lifecycle.hpp, simulator/checkpoint.hpp, which describe each case).
//   L1 init: meta-device init holds the shards (Sharded Param) and the Runtime Overhead;
//      materialising first holds the stage's parameters whole (master dtype) plus the shard of
//      the unit being sharded (FSDP2 copies a unit's shard before it drops the whole tensors).
//   L2 summon_full_params (recurse, with_grads=False): every unit whole at once in the master dtype
//      over the steady state; offload_to_cpu keeps one unit whole on the device at a time and the
//      stage's parameters on the host.
//   L3 full state dict: every tensor gathered whole (dp shards and tp ranks); with offload_to_cpu
//      one piece at a time on the device (FSDP1: a unit's FlatParameter; FSDP2: one tensor), without
//      it the whole state stays on rank 0's device over the steady state.
//   L4 sharded state dict (DCP): each rank stages its 1/world of the state; the device holds
//      nothing more than training does.
#include <cstdint>

#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

struct LifecycleMemory {
    // L1
    int64_t init_meta_bytes = 0;
    int64_t init_materialized_bytes = 0;
    // L2
    int64_t stage_param_bytes = 0;     // the rank's stage's parameters whole, master dtype
    int64_t largest_unit_bytes = 0;    // the largest unit's parameters whole (over the tp ranks too)
    int64_t summon_bytes = 0;          // steady state + every unit whole
    int64_t summon_offload_bytes = 0;  // offload_to_cpu: steady state + the largest unit whole
    int64_t summon_host_bytes = 0;     // offload_to_cpu: on each rank's host
    // L3 / L4: the whole state, what rank 0's device and host hold for a full save (plan.checkpoint's
    // options), what each rank writes under DCP.
    int64_t model_bytes = 0;
    int64_t optimizer_bytes = 0;
    int64_t full_save_rank0_bytes = 0;
    int64_t full_save_rank0_host_bytes = 0;
    int64_t full_save_node_host_bytes = 0;
    int64_t sharded_save_per_rank_bytes = 0;
};

// From the rank's Program (rank 0's, or the first pipeline stage's) and its plan.
LifecycleMemory lifecycleMemory(const Plan& plan, const Program& program);

}  // namespace shardcast::core
