#pragma once
// Checkpoint saves under FSDP (issue 26): what a save costs in memory and time, and what the
// chosen interval leaves of the job's time once failures are counted. The memory (rules L3, L4)
// is the lowering's, core/lower/lifecycle.hpp; this adds the time and the goodput.
//
// What is saved: the model's state (every parameter in the master dtype, as FSDP's state_dict
// returns the original parameters) and the optimizer's (optimizerStatesPerParam states per
// trainable element, master dtype).
//
// Full save (FULL_STATE_DICT; FSDP2: get_state_dict with full_state_dict). Every tensor is gathered
// whole (over the data-parallel shards and the tensor-parallel ranks) and rank 0 writes the lot:
//  - rank 0's device peak is the step's steady state (Program::initial) plus, with
//    offload_to_cpu, the largest piece gathered at once: FSDP1 unshards a whole unit (its
//    FlatParameter) and FSDP2 one tensor; each goes to the host before the next. Without
//    offload_to_cpu the gathered copies stay on the device: the whole state is added (rank0_only
//    only spares the other ranks). More than the budget is an out-of-memory finding;
//  - time: the gathers (one all-gather per unit over the shard group, and over the tp group, of the
//    model's and the optimizer's bytes, the cost model's collective time), the copies to the host
//    (offload_to_cpu, host_link_bytes_per_s) and rank 0's write at its node's storage bandwidth.
// Sharded save (torch.distributed.checkpoint): each rank stages its 1/world of the state to the host
// and its node writes its ranks' shares at the node's storage bandwidth; the device holds nothing
// more than training does.
//
// Goodput (Young 1974, "A first order approximation to the optimum checkpoint interval"; Daly 2006).
// A job on N GPUs fails every M = 1 / (N x failures_per_gpu_hour) hours on average; each save
// blocks training for d seconds, every tau = every_steps x step seconds of work; a failure loses on
// average half a segment (tau + d) and the restart R reads the checkpoint back (the save's bytes at
// the same bandwidth). To first order the wall time per segment is (tau + d)(1 + (tau + d + 2R) /
// (2M)), so goodput = tau / that; it is greatest near tau* = sqrt(2 d M) (Young), which the report
// gives as whole steps (the better of the two around it).
#include <cstdint>

#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

struct CheckpointFigures {
    core::CheckpointMode mode = core::CheckpointMode::None;
    int64_t every_steps = 0;
    int64_t model_bytes = 0;       // the whole model's state
    int64_t optimizer_bytes = 0;   // the whole optimizer's state
    // Full save: rank 0 on the device (steady state + what the save adds) against the budget, and
    // on the host (the gathered state, offload_to_cpu; per node: each rank's without rank0_only).
    int64_t rank0_peak_bytes = 0;
    int64_t budget_bytes = 0;
    bool rank0_fits = true;
    int64_t rank0_host_bytes = 0;
    int64_t node_host_bytes = 0;
    // Sharded save: what each rank writes.
    int64_t per_rank_bytes = 0;
    double gather_s = 0, to_host_s = 0, write_s = 0;
    double save_s = 0;     // gather + to_host + write: training waits for it
    double restart_s = 0;  // reading the checkpoint back after a failure
    // Goodput at the interval, and the best interval.
    double step_s = 0, interval_s = 0, mtbf_s = 0;
    double goodput = 0;
    int64_t best_every_steps = 0;
    double best_goodput = 0;
};

// goodput(tau, d, R, M) of the header comment; 0 when tau <= 0.
double checkpointGoodput(double interval_s, double save_s, double restart_s, double mtbf_s);
// Young's interval sqrt(2 d M); infinity without failures (M infinite).
double youngInterval(double save_s, double mtbf_s);

// The all-gathers that make every unit of `program` whole on each rank: `bytes_of(unit)` bytes of
// each unit gathered over the shard group (none under NO_SHARD, whose ranks hold them whole), then
// the tp-fold bytes over the tp group, at the cost model's collective time; times the pipeline
// stages (each rank's Program is one stage).
double gatherUnitsSeconds(const core::Plan& plan, const core::Program& program, const HardwareProfile& profile,
                          int64_t (*bytes_of)(const core::UnitInfo&, int64_t item, int states));

// The figures of `plan`'s checkpoint (plan.checkpoint.mode != None) from its Program (rank 0's, or
// the first pipeline stage's), the profile in effect, the step time and the memory budget.
CheckpointFigures checkpointFigures(const core::Plan& plan, const core::Program& program, const HardwareProfile& profile,
                                    double step_s, int64_t budget_bytes);

}  // namespace shardcast::sim
