#pragma once
// Exact search over contiguous groupings of a model's blocks into FSDP units (DESIGN.md section 5).
//
// A WrapCostModel is a step-time and peak-memory model that decomposes over units and adjacent
// pairs of units, built from a per-block lowering of the plan (each block's compute, collective
// bytes and memory figures are read off the real Program). Pairwise terms capture what overlaps:
// the all-gather of unit i+1 under the forward of unit i, the reduce-scatter of unit i+1 under the
// backward of unit i, and the memory held while two neighbouring units are live. Dynamic
// programming over (boundary, start of the last unit) finds the grouping that minimises the
// model's step time subject to its peak staying under a cap: exact for this model (the tests check
// it against brute force). searchWrap then validates the model's choice with the full lowering,
// simulation and timed memory curve, tightening the cap when the full evaluation does not fit.
#include <cstdint>
#include <string>
#include <vector>

#include "core/fit.hpp"
#include "core/plan.hpp"
#include "core/result.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// One block's (or a root part's) figures per micro-batch. Times are uncontended.
struct BlockFigures {
    double fwd_ns = 0;             // forward segments plus parameter copy-out on the compute stream
    double bwd_ns = 0;             // recompute, backward and copy-out on the compute stream
    int64_t ag_bytes = 0;          // all-gather S before the forward (0: not gathered)
    int64_t ag_bwd_bytes = 0;      // all-gather S before the backward (0: still unsharded)
    int64_t rs_bytes = 0;          // reduce-scatter S (0: none)
    int64_t ar_bytes = 0;          // all-reduce S (HSDP replicas, NO_SHARD)
    double reduce_extra_ns = 0;    // casts and device-to-host copies after the reduction
    double gather_extra_ns = 0;    // host-to-device copies before the all-gather
    int32_t fwd_tasks = 0, bwd_tasks = 0;  // compute tasks issued per pass
    int64_t unsharded_bytes = 0;   // unsharded parameters allocated while the unit is gathered
    int64_t flat_bytes = 0;        // all-gather buffer (FSDP2 flat output)
    int64_t rs_input_bytes = 0;    // reduce-scatter input, held until the next reduction starts
    int64_t grad_shard_bytes = 0;  // sharded gradient kept until the optimizer step
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
    int64_t base_bytes = 0;       // live while any block runs: initial state, inputs, root params
    int64_t root_flat_bytes = 0;  // root all-gather buffer, held until the first unit's copy-out
    int64_t floor_bytes = 0;      // a peak reached whatever the grouping (the optimizer step)
    double constant_ns = 0;       // step time outside the pair terms (root collectives, optimizer)
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

    // Reads the figures off a per-block lowering of `plan` (its wrap policy is ignored) and
    // calibrates constant_ns so that the model's per-block step equals the simulated one.
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
        int64_t unsharded = 0, flat = 0, flat_bwd = 0, rs_input = 0, fwd_peak = 0, bwd_peak = 0, fwd_delta = 0,
                bwd_delta = 0;
        int32_t lo = 0, hi = 0;
    };
    Unit unit(int32_t lo, int32_t hi) const;  // lo == hi == -1: root before; lo == hi == L: root after
    const Unit& cached(int32_t lo, int32_t hi) const;
    double pairNs(const Unit& x, const Unit& y) const;
    int64_t pairBytes(const Unit& x, const Unit& y) const;  // above base_bytes
    void buildTables();

    WrapCostInputs m_in;
    HardwareProfile m_profile;
    std::vector<int64_t> m_act_prefix, m_unsharded_prefix, m_grad_shard_suffix;
    std::vector<double> m_fwd_prefix, m_bwd_prefix, m_reduce_extra_prefix, m_gather_extra_prefix;
    std::vector<int64_t> m_ag_prefix, m_ag_bwd_prefix, m_rs_prefix, m_ar_prefix, m_flat_prefix, m_rs_input_prefix,
        m_fwd_delta_prefix, m_bwd_delta_prefix;
    std::vector<int64_t> m_task_fwd_prefix, m_task_bwd_prefix;
    std::vector<Unit> m_units;  // [lo * (L + 1) + hi] for lo < hi
    Unit m_root_pre, m_root_post;
};

struct WrapSearchOptions {
    double headroom = core::kDefaultHeadroom;  // fraction of GPU memory kept free (core::judgeFit)
    int max_tightenings = 8;   // re-runs of the DP with a lower cap when the full evaluation overflows
};

struct WrapEvaluation {
    double step_s = 0;
    int64_t peak_bytes = 0;
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
    WrapEvaluation per_block;    // the same for wrap=block, the model's calibration point
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
