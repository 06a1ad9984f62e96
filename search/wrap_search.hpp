#pragma once
// Exact search over contiguous groupings of a model's blocks into FSDP units (DESIGN.md section 5).
//
// A WrapCostModel is a step-time and peak-memory model that decomposes over units and adjacent
// pairs of units. Its inputs come from one per-block lowering of the plan: every parameter,
// gradient and collective buffer size and every collective's size and group from the lowering's
// per-unit table (core::UnitInfo), so that FSDP's rules live in the lowering only; the time and
// the memory of each block's own compute (activations, temporaries, the gradients autograd
// writes) from the Program's tasks of that block's unit. A unit of several blocks sums its
// blocks' figures (FSDP1 pads one FlatParameter per unit, so its sizes differ by < W elements
// per block).
//
// Time (pairNs). Per micro-batch, the compute stream runs each unit's forward with the next
// unit's all-gather under it, and in backward each unit's backward with the previous unit's
// all-gather (prefetch) and the next unit's reduction under it. Compute slows by the profile's
// overlap_compute_slowdown while a collective runs (as in the simulator's event loop; its
// overlap_collective_slowdown, 1 on the GPU presets, is not modelled here: the chosen grouping is
// re-timed by the full simulation, which does model it); the host
// issue cost (a hook per unit, a launch per task) bounds a pass from below. Collective times come
// from the simulator's CostModel, with the sizes and groups of UnitInfo (one group per kind for
// all units), compute times from its durations of the block's tasks. It assumes one all-gather
// prefetched ahead in each direction. Micro-batches that skip the reduction (no_sync) have no
// reduce term. What lies outside the pairs (the root's collectives, the optimizer, start-up) is one
// constant, calibrated so that the per-block grouping's step equals its simulated step.
//
// Memory (pairBytes). Peaks of the timed memory curve (the validation's figure) where they occur,
// each from one pair (x, y) of neighbouring units, x first in forward order:
//   forward:  x's wait (copy-out) and x's compute, each with y's all-gather in flight;
//   the turn: the last unit's forward and the root's output layers, forward and backward, with
//             the last unit's backward re-gather in flight (the host runs ahead into the
//             backward), and its predecessor's too where the per-block simulation shows two
//             all-gathers started by then (FSDP1, whose all-gathers wait for no copy-out);
//   backward: y's compute with x's all-gather in flight (prefetch); the start of y's reduction,
//             its reduce-scatter input made while its gradients are held; x's wait and compute
//             with y's reduce-scatter input held until x's own reduction starts.
// A unit computes on top of what the earlier blocks saved (activations, reshard_after_forward=k
// slices), the later blocks' sharded gradients and the root's output-layer gradients. A unit's
// buffers by phase are UnitInfo's unshard_in_flight_bytes, unshard_wait_bytes and
// unsharded_param_bytes, the same for FSDP1 and FSDP2. What no pair can see, which the full
// simulation in searchWrap checks:
//   - a unit's backward holds both its predecessor's all-gather and its successor's
//     reduce-scatter input: a pair sees one whole and the other through the adjacent block only
//     (exact per block, low by up to the smaller neighbour's excess for larger units);
//   - more all-gathers in flight than one (two at the turn): FSDP2's forward holds two flat
//     outputs ahead of the compute stream, prefetch_depth > 1, FSDP1 in micro-batches that skip
//     the reduction (its all-gathers then queue behind no reduce-scatter);
//   - the next micro-batch's first gathers, which FSDP2 issues during the last reductions, and
//     CPU offload's host-to-device shard copies, which run ahead of their copy-ins;
//   - no_sync: every unit's held gradients count throughout the step (high in the reducing
//     micro-batch).
// Dynamic programming over (boundary, start of the last unit) finds the grouping that minimises
// the model's step time subject to its peak staying under a cap: exact for this model (the tests
// check it against brute force). searchWrap then validates the model's choice with the full
// lowering, simulation and timed memory curve, tightening the cap when the full evaluation does
// not fit: first on its allocated peak, then, for a grouping whose allocated peak fits, on the
// caching allocator's reserved memory (core/memory/caching_allocator.hpp), which is what runs out.
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/memory/fit.hpp"
#include "core/plan/plan.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// One block's (or a root part's) figures per micro-batch. Times are uncontended, read off the
// block's tasks; the sizes of collectives and buffers are the block's core::UnitInfo in the
// per-block lowering; the memory of its compute is read off its compute tasks. A root part has
// compute figures only: the root's buffers are in WrapCostInputs.
struct BlockFigures {
    double fwd_ns = 0;             // forward segments plus parameter copy-out on the compute stream
    double bwd_ns = 0;             // recompute, backward and copy-out on the compute stream
    double reduce_extra_ns = 0;    // casts and device-to-host copies after the reduction
    double gather_extra_ns = 0;    // host-to-device copies before the all-gather
    int32_t fwd_tasks = 0, bwd_tasks = 0;  // compute tasks issued per pass
    int64_t ag_bytes = 0;          // all-gather S before the forward (0: not gathered)
    int64_t ag_bwd_bytes = 0;      // all-gather S before the backward (0: still unsharded)
    int64_t rs_bytes = 0;          // reduce-scatter S (0: none)
    int64_t ar_bytes = 0;          // all-reduce S (HSDP replicas, NO_SHARD)
    int64_t in_flight_bytes = 0;   // UnitInfo::unshard_in_flight_bytes
    int64_t wait_bytes = 0;        // UnitInfo::unshard_wait_bytes
    int64_t unsharded_bytes = 0;   // UnitInfo::unsharded_param_bytes
    int64_t post_forward_shard_bytes = 0;  // UnitInfo::post_forward_shard_bytes
    int64_t rs_input_bytes = 0;    // UnitInfo::reduce_scatter_input_bytes
    int64_t grad_shard_bytes = 0;  // sharded gradient on the device from its reduction to the
                                   // optimizer step (0: in base_bytes, or on the host)
    int64_t fwd_delta_bytes = 0;   // activations left after its forward
    int64_t fwd_peak_bytes = 0;    // highest point inside its forward, relative to its start
    int64_t bwd_delta_bytes = 0;   // net change over its backward (gradients kept - activations freed)
    int64_t bwd_peak_bytes = 0;    // highest point inside its backward, relative to its start
};

struct CollectiveGroup {
    int size = 1;
    int nodes = 1;
};

struct WrapCostInputs {
    std::vector<BlockFigures> blocks;       // Model::blocks order
    BlockFigures root_pre, root_post;       // root compute before and after the blocks
    CollectiveGroup ag_group, ag_bwd_group, rs_group, ar_group;
    int micro_batches = 1;
    int synced_micro_batches = 1;           // micro-batches that reduce gradients (no_sync: 1)
    bool reshard_after_forward = true;
    int unit_tasks_fwd = 0, unit_tasks_bwd = 0;  // per-unit tasks besides compute (copy-in, AG, ...)
    int backward_gathers_ahead = 1;  // all-gathers in flight at the turn into the backward (1 or 2)
    int64_t base_bytes = 0;         // live while any block runs: initial state, inputs, the root's
                                    // parameters, no_sync gradients, sharded gradients kept from
                                    // an earlier micro-batch
    int64_t root_gather_bytes = 0;  // the root's unshard beyond its parameters when the compute
                                    // stream takes it (FSDP2: the flat output)
    int64_t floor_bytes = 0;        // a peak reached whatever the grouping (the root's reduction at
                                    // the end of the backward, the optimizer step)
    double constant_ns = 0;         // step time outside the pair terms (root collectives, optimizer)
};

// A grouping: exclusive ends of the units in block order; the last is the block count.
// {2, 5} for 5 blocks is [0-1][2-4].
using Grouping = std::vector<int32_t>;

struct WrapChoice {
    bool found = false;
    Grouping ends;
    double step_ns = 0;
    int64_t peak_bytes = 0;
};

class WrapCostModel {
public:
    WrapCostModel(WrapCostInputs inputs, const HardwareProfile& profile);

    // Builds the inputs from a per-block lowering of `plan` (its wrap policy is ignored): sizes
    // from its UnitInfo table, compute figures from its tasks. Calibrates constant_ns so that
    // the model's per-block step equals the simulated one.
    static core::Result<WrapCostModel> fromPlan(const core::Plan& plan, const HardwareProfile& profile);

    const WrapCostInputs& inputs() const { return m_in; }
    int blockCount() const { return static_cast<int>(m_in.blocks.size()); }

    // The model's figures for one grouping (asserts it is a valid grouping).
    double stepNs(const Grouping& ends) const;
    int64_t peakBytes(const Grouping& ends) const;

    // The grouping with the smallest stepNs whose peakBytes <= cap_bytes; ties go to fewer
    // units. found=false when none fits.
    WrapChoice best(int64_t cap_bytes) const;

    void setConstantNs(double ns) { m_in.constant_ns = ns; }

private:
    struct Unit {
        double fwd_ns = 0, bwd_ns = 0, ag_ns = 0, ag_bwd_ns = 0, reduce_ns = 0, host_fwd_ns = 0, host_bwd_ns = 0;
        int64_t params = 0;                        // unsharded parameters while it computes
        int64_t in_flight = 0, in_flight_bwd = 0;  // its all-gather before the forward / backward
        int64_t wait = 0, wait_bwd = 0;            // when the compute stream takes it
        int64_t rs_input = 0, fwd_peak = 0, bwd_peak = 0, fwd_delta = 0, bwd_delta = 0;
        int32_t lo = 0, hi = 0;
    };
    Unit unit(int32_t lo, int32_t hi) const;  // lo == hi == 0: root before; lo == hi == L: root after
    const Unit& cached(int32_t lo, int32_t hi) const;
    double pairNs(const Unit& x, const Unit& y) const;
    int64_t pairBytes(const Unit& x, const Unit& y) const;  // above base_bytes
    // The last block unit's forward and the root's output layers, forward and backward, with its
    // backward all-gather and `ahead_bytes` more in flight.
    int64_t turnBytes(const Unit& last, int64_t ahead_bytes) const;
    int64_t saved(int32_t act_pos, int32_t slice_pos) const;  // activations, reshard_after_forward=k slices
    int64_t held(const Unit& u) const;        // unsharded parameters while u computes
    int64_t heldBefore(int32_t pos) const;    // those of the units before block `pos` (ZeRO-2 keeps them)
    void buildTables();

    WrapCostInputs m_in;
    HardwareProfile m_profile;
    std::vector<int64_t> m_act_prefix, m_unsharded_prefix, m_slice_prefix, m_grad_shard_suffix;
    std::vector<double> m_fwd_prefix, m_bwd_prefix, m_reduce_extra_prefix, m_gather_extra_prefix;
    std::vector<int64_t> m_ag_prefix, m_ag_bwd_prefix, m_rs_prefix, m_ar_prefix, m_in_flight_prefix, m_wait_prefix,
        m_rs_input_prefix, m_fwd_delta_prefix, m_bwd_delta_prefix;
    std::vector<int64_t> m_task_fwd_prefix, m_task_bwd_prefix;
    std::vector<Unit> m_units;  // [lo * (L + 1) + hi] for lo < hi
    Unit m_root_pre, m_root_post;
};

struct WrapSearchOptions {
    double headroom = core::kDefaultHeadroom;  // fraction of GPU memory kept free (core::judgeFit)
    int max_tightenings = 8;   // re-runs of the DP with a lower cap when the full evaluation overflows
    // Judge the full evaluation's fit on the caching allocator's reserved memory (what runs out);
    // false: on the allocated peak alone (the cost model's own figure, for tests of it).
    bool reserved_memory = true;
};

struct WrapEvaluation {
    double step_s = 0;
    int64_t peak_bytes = 0;      // allocated, Runtime Overhead included
    int64_t reserved_bytes = 0;  // the caching allocator's peak reserved + Runtime Overhead (0: not replayed)
    bool at_risk = false;        // replayed, and reserved memory does not fit the cap
    bool cache_flushed = false;  // replayed, and the allocator freed its cache at the device limit
    double mfu = 0;
    double exposed_comm_s = 0;
    double tokens_per_s_per_gpu = 0;
};

struct WrapSearchResult {
    bool fits = false;           // a grouping fits under the cap in the full evaluation
    std::string message;         // why none fits and which flag would help; notes on tightening
    Grouping ends;
    core::WrapPolicy wrap;       // Modules policy with "a+b" groups
    int units = 0;               // block units (the root unit comes on top)
    double predicted_step_s = 0;
    int64_t predicted_peak_bytes = 0;
    WrapEvaluation full;         // lowering + simulator + timed memory curve of `wrap`
    WrapEvaluation per_block;    // the same for wrap=block, the model's calibration point (and
                                 // the answer when every grouping the model prefers is at risk)
    int64_t capacity_bytes = 0;
    int64_t cap_bytes = 0;       // capacity * (1 - headroom)
    int tightenings = 0;
    std::vector<std::string> notes;
};

core::Result<WrapSearchResult> searchWrap(const core::Plan& plan, const HardwareProfile& profile,
                                          const WrapSearchOptions& options);

std::string groupingString(const Grouping& ends);  // "[0-3][4-9]", a single block is "[7]"
core::WrapPolicy groupingPolicy(const core::Model& model, const Grouping& ends);
// Every grouping of `blocks` blocks (2^(blocks-1) of them), for tests and small brute forces.
std::vector<Grouping> allGroupings(int blocks);

}  // namespace shardcast::sim
