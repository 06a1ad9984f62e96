#pragma once
// Around the training step (issue 26): what a rank's device holds when the model is made, and
// when summon_full_params unshards it whole. The memory rules (L1, L2) are the lowering's,
// core/lower/lifecycle.hpp, and the eval step's replay core::replayEvalStep; this adds the time
// and the verdicts against the budget.
//
// Init. torchtitan (and FSDP2's documentation) builds the model on the meta device, applies
// fully_shard, then to_empty(device) and initialises the weights in place: a rank only ever holds
// its shards, the step's Sharded Param (master dtype) beside the Runtime Overhead (CUDA context,
// cuBLAS workspace, NCCL). Materialising first (the model built on the GPU, e.g. `.to("cuda")`, then
// fully_shard) holds every parameter of the rank's stage whole in the master dtype, plus the shard
// of the unit being sharded (FSDP2 copies a unit's shard before it drops the whole tensors): a
// model that trains fine can run out of memory here, before step 1.
//
// summon_full_params(model) (FSDP1; recurse=True, with_grads=False): every unit unsharded at once,
// in the master dtype (the full-precision parameters, not mixed precision's copies), over the
// step's steady state (Program::initial): the whole stage's parameters whole (dp shards and tp
// ranks gathered). With offload_to_cpu each unit's whole parameters go to the host as it is
// gathered and its device copy is freed: the device holds the steady state plus the largest unit
// whole; the host the stage's parameters (every rank, or rank 0 alone with rank0_only). Time: the
// all-gathers of every unit (gatherUnitsSeconds) and, with offload_to_cpu, the copies to the host.
//
// An eval step (model.eval() under torch.no_grad(), one micro-batch): FSDP still unshards and
// reshards every unit as in training's forward, and nothing is kept for backward. From the rank's
// Program: its micro-batch 0 up to its last forward task (the all-gathers, copies and forward
// compute issued by then), memory replayed over them from the step's steady state with each task's
// Activation (what training keeps for backward) alive only while the task runs: the loss's logits
// count where they are made, nothing accumulates. Exact where the peak is at the loss (as for
// LLMs with large vocabularies); inside a block it counts all the block's tensors at once, an upper
// bound. Time: the simulated step's end of that last forward task. Not for pipelines (a stage's
// forward waits on the others' sends).
#include <cstdint>

#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

struct LifecycleFigures {
    int64_t budget_bytes = 0;
    int64_t init_meta_bytes = 0;          // meta-device init: Sharded Param + Runtime Overhead
    int64_t init_materialized_bytes = 0;  // built on the GPU, then sharded
    bool init_meta_fits = true, init_materialized_fits = true;
    int64_t stage_param_bytes = 0;        // the rank's stage's parameters whole, master dtype
    int64_t largest_unit_bytes = 0;       // the largest unit's parameters whole, master dtype
    int64_t summon_bytes = 0;             // summon_full_params: steady state + every unit whole
    int64_t summon_offload_bytes = 0;     // offload_to_cpu: steady state + the largest unit whole
    bool summon_fits = true, summon_offload_fits = true;
    int64_t summon_host_bytes = 0;        // offload_to_cpu: the stage's parameters on each rank's host
    double summon_gather_s = 0;           // the all-gathers of every unit's parameters
    double summon_to_host_s = 0;          // offload_to_cpu: the copies to the host
    bool eval_modelled = false;           // false under pipeline parallelism
    int64_t eval_peak_bytes = 0;          // an eval step's peak: steady state + unshards + transients
    bool eval_fits = true;
    int64_t eval_ns = 0;                  // an eval step's time: training's forward phase
};

// From the rank's Program (rank 0's, or the first pipeline stage's), the profile in effect and the
// memory budget that "fits" is judged against.
LifecycleFigures lifecycleFigures(const core::Plan& plan, const core::Program& program, const core::Timeline& timeline,
                                  const HardwareProfile& profile, int64_t budget_bytes);

}  // namespace shardcast::sim
