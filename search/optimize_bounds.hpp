#pragma once
// Proven lower bounds on the step time and the peak memory of one configuration of `shardcast
// optimize`, computed from Programs without simulating them (search/optimize.hpp uses them to
// skip configurations). A configuration is a group (micro-batch, checkpointing) and a sharding
// (everything else); its bound combines a part read from a Program of its group and a part read
// from a Program of its sharding at its accumulation count, so a search lowers |groups| +
// |shardings| x |accumulation counts| Programs instead of simulating |groups| x |shardings|.
//
// Why the parts are each configuration's own. The lowering emits a block's forward, backward and
// recompute tasks, the activations they save and free and their durations from the model and the
// training setup alone (micro-batch, sequence, checkpointing); sharding adds copy-ins, copy-outs,
// casts, collectives and the optimizer step around them, which depend on the sharding and the
// number of micro-batches but not on the checkpointing. The search checks every configuration it
// evaluates against its bound and restarts without pruning on a violation, and the tests check
// the premise (equal parts) on every configuration of their spaces.
//
// Time (ShardingBoundPart, GroupBoundPart -> combineBounds). The simulator runs each stream's tasks
// one at a time in Program order, a task starting no earlier than its dependencies' ends; contention
// only stretches a task when the slowdowns are >= 1: compute-stream and copy-in tasks run
// overlap_compute_slowdown (f) times slower while a collective runs, collectives
// overlap_collective_slowdown (g) times slower while compute runs. So (d = uncontended duration,
// collectives' d scaled by min(1, g)):
//   step >= the sum of d over any one stream's tasks;
//   step >= W + |U| (1 - 1/f), W the compute stream's work and U the time any collective runs:
//     every compute-stream task is slowed, so W = |C \ U| + |C n U| / f over the compute stream's
//     busy time C, and step >= |C u U| = |C \ U| + |U| = W + |U| - |C n U| / f >= W + |U| (1 - 1/f);
//     |U| >= each collective stream's collectives' summed d;
//   step >= head + (compute-stream work from the first to the last kernel) + tail: the first kernel
//     starts no earlier than its ancestors' longest chain of d (head), the compute stream then runs
//     every task up to the last kernel one after another, and the step lasts at least the longest
//     chain of d through the last kernel's descendants (tail: the last reductions, the optimizer);
//   step >= M + |U| (1 - 1/f) + (head + tail) / f, M that compute-stream work from the first to the
//     last kernel: over the interval I from the first kernel's start to the last kernel's end, as
//     above |I| >= M + |U n I| (1 - 1/f), and |U n I| >= |U| - O with O = step - |I| >= head +
//     tail, so step = |I| + O >= M + |U| (1 - 1/f) + O / f.
// Memory. Every free names a buffer a task allocated (Program contract), so the categories never
// drop below Program::initial, and the timed peak (all categories, each >= 0) is at least:
//   initial + the Activation high-water mark of the compute stream: Activation is allocated and
//     freed only by compute-stream tasks (checked: otherwise the part is 0), which run in Program
//     order whatever the timing, and other streams add to Activation only transiently (>= 0);
//   initial + at the internal peak of each forward or backward task p: p's transient bytes plus
//     every buffer live then: allocated by an earlier compute-stream task, by p at its start, or
//     by another stream's task that a compute-stream task before p depends on, and freed by a task
//     that is a strict descendant of p (through dependencies and stream order) or by p at its end.
//     For another stream's allocation only dependency edges inside one unit are followed (a
//     unit's copy-in -> all-gather -> copy-out or first kernel): how collectives of different units
//     chain on a process group depends on prefetch, which the sharding part does not see (fewer
//     edges give a later start: still a bound). Frees deferred to another task's end
//     (MemEvent::timed_after) are not counted as live. The points are matched between the two
//     Programs by their rank among a micro-batch's forward and backward tasks (the Programs hold
//     the same segments); the group side takes the least over micro-batches, the sharding side
//     the most.
// Pipelines (pp > 1). Both parts come from Programs of the first pipeline rank (its stages' blocks
// in its schedule's order; the group part's reference has the space's pp and schedule). The
// pipeline's step is the slowest rank's timeline, and a receive on it lasts at least its own
// transfer (it ends when its send's data lands, if later: simulator/pipeline.hpp), so the rank's
// time bounds hold for the step; its peak is at most the binding rank's. The bubble adds a bound
// of its own (GroupBoundPart::pipeline_ns), the chain micro-batch 0 takes through the G = pp x V
// stages: stage g's forward of it cannot start before stage g - 1 sent its activations, which
// follows that stage's last forward task of it, and its backward cannot start before stage g + 1
// sent the input gradient; each rank's compute stream runs its tasks one at a time in Program
// order. So, with K(a..b) the uncontended kernels (forward, backward, recompute) a compute stream
// runs from task a through task b:
//   step >= K(stage 0: its first task .. its last forward of mb 0)
//         + sum over 0 < g < G - 1 of K(g: first .. last forward of mb 0) + K(g: first .. last backward of mb 0)
//         + K(stage G - 1: first forward .. last backward of mb 0)
//         + K(stage 0: first backward of mb 0 .. its last task),
// each term counted only where the Program orders it behind the receive and ahead of the send it
// needs (checked through dependencies and stream order; otherwise the chain is 0). It depends on
// the model, the micro-batches and the schedule, not on the sharding: the search lowers every
// pipeline rank of each group once.
// Shardings that differ only in prefetch share one sharding part (prefetch moves when a unit is
// gathered, not which collectives, copies and buffers there are), and Program::initial does not
// depend on the micro-batches; the tests check both.
#include <cstdint>
#include <vector>

#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// From a Program of the configuration's group (any sharding).
struct GroupBoundPart {
    int64_t kernels_ns = 0;             // forward, backward and recompute tasks, uncontended
    int64_t activation_peak_bytes = 0;  // the compute stream's Activation high-water mark
    // Per forward or backward task of a micro-batch: its transient bytes plus the Activation live
    // at its peak (the least over micro-batches); empty when the micro-batches differ in shape.
    std::vector<int64_t> at_kernels;
    int64_t pipeline_ns = 0;  // pp > 1: micro-batch 0's chain through the stages (0: none proved)
    bool operator==(const GroupBoundPart&) const = default;
};

// What one pipeline rank's Program gives the chain (see above), per stage it holds (Task::chunk):
// `forward` is K(first .. last forward of micro-batch 0), from the Program's first task on stage
// 0, through the last backward on the last stage; `backward` is K(first .. last backward of it),
// through the Program's last task on stage 0 (0 on the last stage). Empty when the Program does
// not order a term behind its receive and ahead of its send.
struct PipelineRankPart {
    std::vector<int64_t> forward, backward;
};
// The chain from every pipeline rank's part (index = pipeline rank); 0 when any is empty.
int64_t pipelineChainNs(const std::vector<PipelineRankPart>& ranks);

// From a Program of the configuration's sharding at its number of micro-batches (any checkpointing).
struct ShardingBoundPart {
    int64_t other_compute_ns = 0;   // compute-stream tasks besides forward, backward and recompute
    int64_t between_kernels_ns = 0; // of them, those between the first and the last kernel
    int64_t head_ns = 0;            // the longest chain before the first kernel starts
    int64_t tail_ns = 0;            // the longest chain after the last kernel ends
    int64_t collectives_ns = 0;     // the largest of the collective streams' summed collectives
    int64_t stream_busy_ns = 0;     // the busiest non-compute stream
    int64_t initial_bytes = 0;      // Program::initial, all categories
    // Per forward or backward task of a micro-batch: non-Activation bytes live at its peak (the
    // most over micro-batches); empty when the micro-batches differ in shape.
    std::vector<int64_t> at_kernels;
    bool operator==(const ShardingBoundPart&) const = default;
};

struct ConfigurationBounds {
    int64_t step_ns = 0;
    int64_t peak_bytes = 0;
};

// Scratch vectors kept between calls.
class BoundAnalyzer {
public:
    GroupBoundPart groupPart(const core::Program& program, const CostModel& cost);
    ShardingBoundPart shardingPart(const core::Program& program, const CostModel& cost, const HardwareProfile& profile);
    PipelineRankPart pipelineRankPart(const core::Program& program, const CostModel& cost);

private:
    // Per kernel point (see above) over the micro-batches: Activation live plus the task's
    // transient bytes (least), and other bytes live (most).
    void livePerKernel(const core::Program& program);
    // Which buffers hold activations for the bounds: allocated as Activation, or made by a
    // recompute (the lowering files those as Temp, as FSDPMemTracker does, but like the forward's
    // they depend on the checkpointing and the micro-batch, not on the sharding). m_activation
    // marks such buffers as their allocations are met, so that their frees count too.
    static bool activatesBuffer(const core::Task& t, const core::MemEvent& e) {
        return e.category == core::MemCategory::Activation || (t.kind == core::TaskKind::Recompute && e.bytes > 0);
    }
    bool activationEvent(const core::Task& t, const core::MemEvent& e) const {
        if (activatesBuffer(t, e)) return true;
        return e.buffer >= 0 && static_cast<size_t>(e.buffer) < m_activation.size() && m_activation[static_cast<size_t>(e.buffer)];
    }
    // Durations of every task but the kernels (collectives scaled by min(1, g)).
    void durations(const core::Program& program, const CostModel& cost, double collective_scale);

    std::vector<int32_t> m_stream_prev;  // the task before each on its stream, -1 for the first
    std::vector<int32_t> m_compute_index;  // ordinal on the compute stream, -1 for other streams
    std::vector<int32_t> m_min_desc, m_max_anc;  // compute ordinals of the nearest strict descendant / ancestor
    std::vector<int64_t> m_diff_activation, m_diff_other;
    std::vector<int64_t> m_duration, m_end;
    std::vector<uint8_t> m_mark;
    std::vector<int64_t> m_group_points, m_sharding_points;
    std::vector<int32_t> m_lo, m_hi;  // per buffer: the compute ordinals it is live over
    std::vector<int64_t> m_bytes;
    std::vector<uint8_t> m_activation;  // per buffer: holds activations (activatesBuffer)
    std::vector<std::vector<int64_t>> m_group_per_mb, m_sharding_per_mb;
};

// The bounds of a configuration from its two parts (time bounds hold when the profile's
// overlap_compute_slowdown >= 1; with a smaller one the time bound is 0).
ConfigurationBounds combineBounds(const GroupBoundPart& group, const ShardingBoundPart& sharding,
                                  const HardwareProfile& profile);

}  // namespace shardcast::sim
