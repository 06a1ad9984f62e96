#pragma once
// `shardcast optimize` (issue 13): the fastest configuration of a job over a space of strategies,
// meshes, wrap units, activation checkpointing, micro-batch x accumulation, reshard_after_forward,
// prefetch and CPU offload, scored by the evaluation API (simulator/evaluation.hpp) and exact under
// it: every configuration is either evaluated or pruned by a proven lower bound on its step time or peak.
//
// The bounds (search/optimize_bounds.hpp, where each is proved) are per configuration: a part
// from a Program of its (micro-batch, checkpointing) group and a part from a Program of its
// sharding at its accumulation count, so the search lowers those few Programs instead of
// simulating every configuration. It is best-first: groups in increasing bound of their compute,
// each expanded into its configurations' bounds when reached, configurations in increasing step
// bound; one whose peak bound exceeds the budget cannot fit, and once the next bound exceeds the
// step time of the T-th fastest fitting configuration found, nothing left can enter the top T.
// Configurations are evaluated on allocated memory; fit is judged on reserved memory (the caching
// allocator's replay, most of an evaluation's cost) only for those that can enter the answer and
// that may fit: reserved is never below allocated, nor below the sum over streams of what each
// stream has allocated at most (a cached block serves only its stream), so a configuration with
// either over the budget cannot fit (OptimizeStats counts the replays).
// Every evaluated configuration is checked against its bounds; a violation (a bug in a premise)
// turns pruning off and restarts the search, so the answer stays exact.
//
// Not in the space (the Plan cannot express them yet): activation checkpointing per block beyond
// the first-N family (OptimizeSpace::ac_first_n; a plan can give any mode per block), arbitrary
// contiguous groupings of blocks (the wrap choices are a list of policies; `shardcast search` then finds the exact grouping
// for a chosen configuration), explicit FSDP2 prefetch lists (the implicit prefetch depth is).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"
#include "core/memory/fit.hpp"
#include "core/plan/plan.hpp"
#include "search/optimize_bounds.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

class CancelToken;

// What the search may choose; an empty list means every choice listed on the field.
// A pipeline schedule of the space: GPipe, 1F1B, or Interleaved1F1B with its stages per rank.
struct PipelineScheduleChoice {
    core::PpSchedule schedule = core::PpSchedule::OneFOneB;
    int virtual_stages = 1;
    bool operator==(const PipelineScheduleChoice&) const = default;
};
// "GPipe", "1F1B" or "Interleaved1F1B:V" (V >= 2 stages per rank); errors name what is valid.
core::Result<PipelineScheduleChoice> parsePipelineScheduleChoice(std::string_view text);
std::string pipelineScheduleChoiceName(const PipelineScheduleChoice& c);

struct OptimizeSpace {
    std::vector<core::Strategy> strategies;  // empty: all five
    std::vector<int> hybrid_shard_sizes;     // empty: every divisor d of the world size, 1 < d < world
    std::vector<int> fsdp_versions;          // empty: {2, 1}
    std::vector<core::WrapPolicy> wraps;     // empty: defaultWrapChoices(model)
    std::vector<core::AcSpec> acs;           // empty: defaultAcChoices(model)
    // Also activation checkpointing per block: the first N blocks in one mode, the rest in another
    // (firstNAcChoices), added to `acs` for the pairs (X, Y) whose modes `acs` holds for the whole
    // model. Opt-in: it multiplies the groups by about the block count.
    bool ac_first_n = false;
    std::vector<core::Offload> offloads;     // empty: {none, cpu}
    int64_t max_micro_batch = 0;             // 0: up to the batch per rank
    // FSDP2 FULL_SHARD / HYBRID_SHARD whose shard group spans nodes may also re-shard to the GPUs of
    // one node after forward (reshard_after_forward = GPUs per node).
    bool partial_reshard = true;
    // FSDP2: prefetch depth 1 and 2; FSDP1: backward_prefetch PRE and POST, forward_prefetch off and on.
    // false: the defaults only.
    bool prefetch = true;
    // Tensor-parallel degrees (issue 25): each is searched as its own space over the world / tp
    // data-parallel ranks (FSDP2, sharded strategies, no offload: what composes with TP), by the
    // same bounds, and the answers merged exactly. Empty: the base plan's tp only.
    std::vector<int> tps;
    // Pipeline stage counts (issue 25), with the base plan's schedule: each (tp, pp) is its own space
    // over the world / (tp x pp) data-parallel ranks, whose micro-batches per step are the
    // pipeline's. Its bounds are those of the first pipeline rank's Program, which hold for the
    // pipeline's step and peak (search/optimize_bounds.hpp). Empty: the base plan's pp only.
    std::vector<int> pps;
    // Pipeline schedules (issue 25), each searched with every pp > 1 of `pps` as its own space, the
    // answers merged exactly. Empty: the base plan's schedule only.
    std::vector<PipelineScheduleChoice> pp_schedules;
};

// Whole model, every K blocks for K in {8, 4, 2} below the block count, and one unit per block.
std::vector<core::WrapPolicy> defaultWrapChoices(const core::Model& model);
// none, attn-core, op, layer:2 (with at least 2 blocks), full.
std::vector<core::AcSpec> defaultAcChoices(const core::Model& model);
// Per block, the family "the first N blocks in mode X, the rest in mode Y" (Megatron's
// --recompute-method block --recompute-num-layers N is X = full, Y = none) for (X, Y) in
// {(full, none), (full, op), (op, none)} and N = 1 .. L-1, as blocks:X*N,Y*(L-N) specs (N = 0 and
// N = L are the whole-model modes Y and X).
std::vector<core::AcSpec> firstNAcChoices(const core::Model& model);

struct OptimizeOptions {
    int64_t global_batch = 0;   // sequences per optimizer step over all ranks
    double headroom = core::kDefaultHeadroom;
    int top = 5;                // configurations kept in OptimizeResult::top (>= 1)
    bool prune = true;          // false: evaluate everything (tests compare the two)
    const CancelToken* cancel = nullptr;
    std::function<void(size_t done, size_t total)> progress;  // on the calling thread
    // Tests only: added to every step-time bound in the self-check, so that a wrong bound can be
    // simulated and its detection (a restart without pruning) tested. 0 in real use.
    int64_t bound_error_ns = 0;
};

// One point of the space.
struct OptimizeChoice {
    core::Strategy strategy = core::Strategy::FullShard;
    int shard_size = 0;
    int fsdp = 2;
    core::ReshardMode reshard = core::ReshardMode::Default;
    int reshard_k = 0;
    int prefetch_depth = 1;
    bool forward_prefetch = false;
    core::ShardingSpec::BackwardPrefetch backward_prefetch = core::ShardingSpec::BackwardPrefetch::Pre;
    core::Offload offload = core::Offload::None;
    core::WrapPolicy wrap;
    core::AcSpec ac;
    int64_t micro_batch = 1;
    int64_t grad_accum = 1;
    int tp = 1;  // tensor-parallel degree
    int pp = 1;  // pipeline stages (ranks)
    core::PpSchedule pp_schedule = core::PpSchedule::OneFOneB;  // with pp > 1
    int pp_virtual = 1;  // stages per pipeline rank (Interleaved1F1B)
};

// `base` with the choice applied.
core::Plan applyChoice(const core::Plan& base, const OptimizeChoice& c);

struct OptimizeEntry {
    OptimizeChoice choice;
    double step_s = 0;
    double tokens_per_s_per_gpu = 0;
    double mfu = 0;
    int64_t peak_bytes = 0;     // the figure the evaluation's fit verdict judges (judgedPeakBytes)
    int64_t allocated_bytes = 0;  // the allocated peak (Runtime Overhead included): <= peak_bytes
    // peak_bytes is a lower bound on the judged peak, not the replayed figure: only in
    // OptimizeResult::at_risk, for a configuration shown not to fit without replaying its allocator.
    bool peak_is_bound = false;
    int64_t budget_bytes = 0;   // capacity less the headroom
    bool fits = false;
};

// The dimensions a choice is made in, for OptimizeResult::losses.
enum class OptimizeDimension : uint8_t { Strategy, Fsdp, Reshard, Prefetch, Offload, Wrap, Ac, MicroBatch, Tp, Pp };
inline constexpr int kOptimizeDimensionCount = 10;
std::string_view dimensionName(OptimizeDimension d);  // "strategy", "fsdp", ...
std::string choiceValue(const OptimizeChoice& c, OptimizeDimension d);  // "HYBRID_SHARD (shard 8)", ...
// The choice as the losses price it: choiceValue, except that a per-block checkpointing spec of two
// runs (the first-N family, --ac-per-block) stands for its whole pair of modes,
// "blocks:full*N,none*rest": the loss of that pair is its best N.
std::string lossValue(const OptimizeChoice& c, OptimizeDimension d);

// The best fitting configuration with `value` in `dimension` instead of the winner's (exact: found
// by the same bounds, restricted to that choice).
struct DimensionLoss {
    OptimizeDimension dimension = OptimizeDimension::Strategy;
    std::string value;          // the other choice (lossValue)
    std::string best_value;     // the choice of the best configuration with it (choiceValue): the
                                // N of a first-N family; `value` otherwise
    std::string winner_value;   // the winner's choice
    bool fits = false;          // some configuration with `value` fits
    double step_s = 0;          // of the best one (fits)
    double tokens_per_s_per_gpu = 0;
    double change = 0;          // tokens/s relative to the winner's: -0.07 = 7% fewer
};

// Where a search spent its work (`shardcast optimize --stats`, and "search" in --json).
struct OptimizeStats {
    size_t bound_programs = 0;     // plans lowered (not simulated) for the bounds
    size_t pruned_by_memory = 0;   // configurations whose peak bound exceeds the budget
    size_t pruned_by_time = 0;     // configurations whose step bound exceeds the T-th fastest found
    size_t loss_evaluations = 0;   // of the evaluated, those made only to price other choices (losses)
    size_t front_evaluations = 0;  // of the evaluated, those made only to complete the Pareto front
    // Fit is judged on reserved memory by replaying the caching allocator, but only for the
    // configurations that can enter the answer (the winner, the top T, the front, the losses, the
    // closest when nothing fits) and whose lower bounds on reserved memory fit (see optimize.cpp,
    // reservedFloorBytes). Without pruning, every evaluated configuration is replayed.
    size_t reserved_replays = 0;   // allocator replays (at most one per evaluated configuration)
    size_t reevaluations = 0;      // of them, on a configuration evaluated again to replay it
    size_t replays_reused = 0;     // of them, answered by an earlier replay of the same calls
    double seconds = 0;            // the whole search
    double bound_seconds = 0;      // lowering and analysing the bound programs
    double lower_seconds = 0;      // in full evaluations: lowering
    double simulate_seconds = 0;   //   simulation
    double memory_seconds = 0;     //   memory on the timeline
    double other_evaluation_seconds = 0;  // validation and summary
    double replay_seconds = 0;     // the allocator replays
};

struct OptimizeResult {
    bool fits = false;            // some configuration fits
    OptimizeEntry best;           // the winner; when nothing fits, the configuration closest to fitting
    std::vector<OptimizeEntry> top;    // fastest fitting first, at most OptimizeOptions::top
    // Pareto front of (peak, step time) over every fitting configuration of the space, by
    // increasing peak (found by the same bounds: exact).
    std::vector<OptimizeEntry> front;
    // A front limited to steps below this would say so; 0: the front covers the whole space (it
    // always does now; kept for --json readers).
    double cutoff_step_s = 0;
    std::vector<DimensionLoss> losses;
    // Configurations with a shorter step than the winner's whose allocated peak fits the budget but
    // whose reserved peak does not (AT RISK: the caching allocator's fragmentation can OOM them),
    // fastest first: what a search on allocated memory would have answered. Exactly these; empty
    // when nothing fits.
    std::vector<OptimizeEntry> at_risk;
    size_t space_size = 0;        // configurations in the space
    size_t evaluated = 0;         // of them, scored by the full evaluation
    size_t invalid = 0;           // of the evaluated, refused by the plan's validation
    size_t pruned = 0;            // skipped by the bound
    bool bound_restarted = false; // a bound was violated and the search re-ran without pruning
    OptimizeStats stats;          // of the search that produced this result
    int64_t batch_per_rank = 0;   // sequences per data-parallel rank (of the winner's tp)
    std::string no_fit;           // nothing fits: the closest configuration, by how much, what would help
    std::vector<std::string> not_searched;  // dimensions of the issue the space leaves out, in words
};

// The figure an evaluation's fit verdict judges against the budget (the allocator's reserved peak
// where the evaluation models it, the allocated peak otherwise): marginBytes() is measured from it.
inline int64_t judgedPeakBytes(const core::FitVerdict& f) {
    return f.fits ? f.budget_bytes - f.marginBytes() : f.budget_bytes + f.marginBytes();
}

// The search. `base` supplies the model, cluster and training setup (its sharding and
// micro-batch are replaced). Errors: a global batch that does not split over the ranks, an empty
// space, a cancelled search (core::cancelledError()).
core::Result<OptimizeResult> optimize(const core::Plan& base, const OptimizeSpace& space, const HardwareProfile& profile,
                                      const OptimizeOptions& options);

// The bounds of `plan`'s own configuration and their two parts, from its Program (tests check them
// against evaluations, and that the parts are shared as the search assumes).
struct BoundParts {
    GroupBoundPart group;
    ShardingBoundPart sharding;
};
core::Result<BoundParts> boundParts(const core::Plan& plan, const HardwareProfile& profile);
core::Result<ConfigurationBounds> configurationBounds(const core::Plan& plan, const HardwareProfile& profile);

// Every configuration of the space in enumeration order (for tests and exhaustive comparisons).
core::Result<std::vector<OptimizeChoice>> enumerateSpace(const core::Plan& base, const OptimizeSpace& space,
                                                         int64_t global_batch);

}  // namespace shardcast::sim
