#include "gui/state/plan_results.hpp"

#include <utility>

#include "simulator/pytorch_code.hpp"

namespace shardcast::gui {

namespace {
constexpr std::array<core::Strategy, 5> kStrategies = {core::Strategy::NoShard, core::Strategy::ShardGradOp,
                                                       core::Strategy::FullShard, core::Strategy::HybridShard,
                                                       core::Strategy::HybridShardZero2};
}

core::Result<std::shared_ptr<PlanResult>> computePlan(const core::PlanOverrides& overrides, sim::Evaluator& evaluator,
                                                      const sim::CancelToken* cancel, const std::string& profile) {
    auto plan = core::buildPlan(overrides);
    if (!plan) return plan.error();
    auto out = std::make_shared<PlanResult>();
    out->overrides = overrides;
    out->plan = std::move(plan).value();
    std::filesystem::path store;
    if (!profile.empty()) {
        auto path = db::defaultDbPath();
        if (!path) return core::makeError("--profile: " + path.error().message);
        store = *path;
    }
    auto resolved = planstore::resolveProfile(out->plan.cluster, profile, store);
    if (!resolved) return core::makeError("--profile: " + resolved.error().message);
    out->profile = std::move(resolved).value();
    sim::EvaluationOptions options;
    options.record_curve = true;
    options.period_over = sim::kPeriodOver;  // saving evaluates the step whole (MainWindow::saveToStore)
    options.cancel = cancel;
    if (auto s = evaluator.evaluate(out->plan, &out->profile.profile, options, out->eval); !s) return s.error();
    return out;
}

core::Result<std::shared_ptr<StrategyComparison>> computeStrategies(const PlanResult& plan, sim::Evaluator& evaluator,
                                                                    const sim::CancelToken* cancel) {
    auto out = std::make_shared<StrategyComparison>();
    out->generation = plan.generation;
    out->capacity_bytes = plan.eval.fit.capacity_bytes;
    out->budget_bytes = plan.eval.fit.budget_bytes;
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    options.period_over = sim::kPeriodOver;
    options.cancel = cancel;
    sim::Evaluation e;
    for (core::Strategy s : kStrategies) {
        StrategyFit fit;
        fit.strategy = s;
        if (s == plan.plan.sharding.strategy) {
            fit.ok = true;
            fit.peak_bytes = plan.eval.summary.peak_bytes;
            fit.at_peak = plan.eval.summary.at_peak;
            fit.step_s = plan.eval.summary.step_s;
            fit.fits = plan.eval.fit.fits;
        } else {
            core::Plan variant = plan.plan;
            variant.sharding.strategy = s;
            if (auto status = evaluator.evaluate(variant, &plan.profile.profile, options, e); !status) {
                if (status.error().cancelled) return status.error();
                fit.error = status.error().message;
            } else {
                fit.ok = true;
                fit.peak_bytes = e.summary.peak_bytes;
                fit.at_peak = e.summary.at_peak;
                fit.step_s = e.summary.step_s;
                fit.fits = e.fit.fits;
            }
        }
        out->strategies.push_back(std::move(fit));
    }
    return out;
}

core::Result<std::shared_ptr<WrapResult>> computeWrap(const PlanResult& plan, const sim::CancelToken* cancel) {
    auto out = std::make_shared<WrapResult>();
    out->generation = plan.generation;
    out->base = plan.plan;
    out->capacity_bytes = plan.eval.fit.capacity_bytes;
    out->budget_bytes = plan.eval.fit.budget_bytes;
    const sim::HardwareProfile& profile = plan.profile.profile;
    sim::SweepOptions options;
    options.acs = {core::AcSpec{core::Checkpointing::None, 1}, core::AcSpec{core::Checkpointing::Full, 1}};
    options.cancel = cancel;
    options.reserved_for_every_candidate = false;  // the view shows each candidate's verdict, not its reserved figure
    const std::vector<sim::SweepCandidate> candidates = sim::sweepCandidates(plan.plan, options);
    out->sweep = sim::runSweep(plan.plan, candidates, profile, options);
    if (cancel && cancel->cancelled()) return core::cancelledError();
    out->front = sim::paretoFront(out->sweep);
    out->recommended = sim::recommend(out->sweep);

    if (!plan.plan.model->blocks.empty()) {
        auto search = sim::searchWrap(plan.plan, profile, sim::WrapSearchOptions{});
        if (cancel && cancel->cancelled()) return core::cancelledError();
        if (search) {
            out->search_ok = true;
            out->search = std::move(search).value();
            core::Plan chosen = plan.plan;
            chosen.sharding.wrap = out->search.wrap;
            out->pytorch_code = sim::pytorchCode(chosen, plan.eval.mesh, sim::unitsOfPolicy(out->search.wrap));
        } else {
            out->search_error = search.error().message;
        }
    } else {
        out->search_error = "the model has no transformer blocks to group";
    }
    return out;
}

core::Result<std::shared_ptr<OptimizeRun>> computeOptimize(const PlanResult& plan, const sim::CancelToken* cancel) {
    auto out = std::make_shared<OptimizeRun>();
    const core::TrainingSpec& t = plan.plan.training;
    out->global_batch = t.micro_batch * t.grad_accum * plan.eval.mesh.world_size;
    sim::OptimizeOptions options;
    options.global_batch = out->global_batch;
    options.headroom = plan.eval.fit.headroom;
    options.cancel = cancel;
    auto result = sim::optimize(plan.plan, sim::OptimizeSpace{}, plan.profile.profile, options);
    if (!result) return result.error();
    out->result = std::move(result).value();
    out->winner = sim::applyChoice(plan.plan, out->result.best.choice);
    return out;
}

std::string describeChoice(const sim::OptimizeChoice& choice) {
    std::string out;
    for (int d = 0; d < sim::kOptimizeDimensionCount; ++d) {
        const auto dim = static_cast<sim::OptimizeDimension>(d);
        if (!out.empty()) out += ", ";
        out += std::string(sim::dimensionName(dim)) + " " + sim::choiceValue(choice, dim);
    }
    return out;
}

}  // namespace shardcast::gui
