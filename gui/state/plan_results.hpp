#pragma once
// What the planner hands the views, and the functions that compute it (on the planner's worker
// thread, or directly in tests and benchmarks). Each calls the library: buildPlan, Evaluator,
// runSweep, searchWrap, pytorchCode; nothing here decides anything about FSDP.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "planstore/planstore.hpp"
#include "search/optimize.hpp"
#include "search/sweep.hpp"
#include "search/wrap_search.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::gui {

struct PlanResult {
    uint64_t generation = 0;
    core::PlanOverrides overrides;
    core::Plan plan;
    planstore::ResolvedProfile profile;  // the hardware figures every stage of this plan used
    sim::Evaluation eval;                // evaluated with record_curve on
};

// The fit view's bars: the current plan under each of the five strategies.
struct StrategyFit {
    core::Strategy strategy = core::Strategy::FullShard;
    bool ok = false;
    std::string error;  // why the plan is invalid under this strategy
    int64_t peak_bytes = 0;
    core::CategoryBytes at_peak{};
    double step_s = 0;
    bool fits = false;
};

struct StrategyComparison {
    uint64_t generation = 0;
    int64_t capacity_bytes = 0;
    int64_t budget_bytes = 0;
    std::vector<StrategyFit> strategies;  // Strategy order, all five
};

struct WrapResult {
    uint64_t generation = 0;
    core::Plan base;
    int64_t capacity_bytes = 0;
    int64_t budget_bytes = 0;
    std::vector<sim::SweepResult> sweep;  // candidate order
    std::vector<size_t> front;            // indices into sweep, by increasing peak
    int64_t recommended = -1;             // sim::recommend
    bool search_ok = false;
    std::string search_error;
    sim::WrapSearchResult search;
    std::string pytorch_code;             // of the search's grouping
};

// `shardcast optimize` on the current inputs: the same model, cluster, profile and global batch
// (micro-batch x accumulation x GPUs), over the whole space (search/optimize.hpp).
struct OptimizeRun {
    int64_t global_batch = 0;
    sim::OptimizeResult result;
    core::Plan winner;  // the base plan with the winner applied (or the closest when nothing fits)
};

// Builds the plan from `overrides` and evaluates it (record_curve on) with the hardware profile
// `profile` names (planstore::resolveProfile: "" the GPU's documented figures, a profile file, or a
// profile stored in the store at db::defaultDbPath()). Errors: buildPlan's (naming the flag), the
// profile's (prefixed "--profile: "), the evaluation's (naming the plan field), or cancelled.
core::Result<std::shared_ptr<PlanResult>> computePlan(const core::PlanOverrides& overrides, sim::Evaluator& evaluator,
                                                      const sim::CancelToken* cancel, const std::string& profile = {});

// The five strategies of `plan`, each evaluated without the curve.
core::Result<std::shared_ptr<StrategyComparison>> computeStrategies(const PlanResult& plan, sim::Evaluator& evaluator,
                                                                    const sim::CancelToken* cancel);

// Every sweep candidate (wrap policy x strategy x AC none/full) and the exact wrap search.
core::Result<std::shared_ptr<WrapResult>> computeWrap(const PlanResult& plan, const sim::CancelToken* cancel);

// Runs the optimizer for `plan` (on the calling thread; cancellable).
core::Result<std::shared_ptr<OptimizeRun>> computeOptimize(const PlanResult& plan, const sim::CancelToken* cancel);

// "FULL_SHARD, FSDP2, wrap block, AC op, mb 2 x accum 4, ..." (every dimension of the choice).
std::string describeChoice(const sim::OptimizeChoice& choice);

}  // namespace shardcast::gui
