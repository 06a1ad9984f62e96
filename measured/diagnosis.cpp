#include "measured/diagnosis.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/results/compare.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

using core::Stream;
using core::TaskKind;

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// A finding is worth a line when it costs at least this much of the step.
constexpr double kFindingShareOfStep = 0.01;
constexpr int64_t kFindingFloorNs = 100'000;
// A rank is a straggler when its step is this much longer than the median rank's.
constexpr double kStragglerExcess = 0.05;

struct Remedy {
    std::string change;
    int64_t step_ns = 0;
};

// Plan changes that hide all-gathers, predicted on the same profile; those that no longer fit are
// dropped. The fastest first.
std::vector<Remedy> unshardRemedies(const core::Plan& plan, const HardwareProfile& profile) {
    std::vector<std::pair<std::string, core::Plan>> candidates;
    const core::ShardingSpec& sh = plan.sharding;
    if (sh.fsdp_version == 2 && sh.prefetch_depth < 4) {
        core::Plan p = plan;
        p.sharding.prefetch_depth = sh.prefetch_depth + 1;
        candidates.emplace_back(fmt::format("prefetch {} units ahead (prefetch_depth {}: set_modules_to_forward_prefetch "
                                            "/ set_modules_to_backward_prefetch)",
                                            p.sharding.prefetch_depth, p.sharding.prefetch_depth),
                                std::move(p));
    }
    if (sh.fsdp_version == 1 && !sh.forward_prefetch) {
        core::Plan p = plan;
        p.sharding.forward_prefetch = true;
        candidates.emplace_back("forward_prefetch=True", std::move(p));
    }
    if (sh.wrap.kind == core::WrapKind::Whole) {
        core::Plan p = plan;
        p.sharding.wrap = core::WrapPolicy{};
        candidates.emplace_back("wrap each block in its own unit (smaller all-gathers overlap the previous block)", std::move(p));
    }
    if (sh.strategy == core::Strategy::FullShard) {
        core::Plan p = plan;
        p.sharding.strategy = core::Strategy::ShardGradOp;
        candidates.emplace_back("SHARD_GRAD_OP (reshard_after_forward=False: no all-gathers in backward)", std::move(p));
    }
    if (plan.cluster.nodes > 1 && !core::isHybrid(sh.strategy)) {
        core::Plan p = plan;
        p.sharding.strategy = core::Strategy::HybridShard;
        p.sharding.shard_size = 0;
        candidates.emplace_back("HYBRID_SHARD (shard inside a node, all-gathers over NVLink)", std::move(p));
    }
    std::vector<Remedy> out;
    Evaluator evaluator;
    EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    Evaluation e;
    for (auto& [change, p] : candidates) {
        if (!evaluator.evaluate(p, &profile, options, e) || !e.fit.fits) continue;
        out.push_back(Remedy{change, e.timeline.step_ns});
    }
    std::sort(out.begin(), out.end(), [](const Remedy& a, const Remedy& b) { return a.step_ns < b.step_ns; });
    return out;
}

std::optional<double> error(int64_t p, int64_t m, bool have) { return have ? core::relativeError(p, m) : std::nullopt; }

}  // namespace

std::string_view findingKindName(Finding::Kind k) {
    switch (k) {
    case Finding::Kind::LazyUnshard: return "lazy_unshard";
    case Finding::Kind::AllGatherExceedsCompute: return "all_gather_exceeds_compute";
    case Finding::Kind::Straggler: return "straggler";
    }
    return "?";
}

double UnitComparison::worstError() const {
    double w = 0;
    for (const auto& e : {forward_error, backward_error, all_gather_error, reduce_error}) {
        if (e) w = std::max(w, std::fabs(*e));
    }
    return w;
}

std::vector<UnitTimes> unitTimes(const core::Program& program, const core::Timeline& timeline, const std::vector<uint8_t>& skip) {
    std::vector<UnitTimes> out(program.units.size());
    const auto skipped = [&](int32_t id) { return !skip.empty() && skip[static_cast<size_t>(id)] != 0; };
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.unit < 0 || skipped(id)) continue;
        UnitTimes& u = out[static_cast<size_t>(t.unit)];
        const int64_t d = timeline.tasks[static_cast<size_t>(id)].durationNs();
        switch (t.kind) {
        case TaskKind::Forward: u.forward_ns += d; break;
        case TaskKind::Backward: u.backward_ns += d; break;
        case TaskKind::AllGather: u.all_gather_ns += d; break;
        case TaskKind::ReduceScatter:
        case TaskKind::AllReduce: u.reduce_ns += d; break;
        default: break;
        }
    }
    // Waits: the part of each all-gather during which the compute stream ran nothing (its tasks do
    // not overlap one another, so that is the all-gather's span less its overlap with them).
    std::vector<std::pair<int64_t, int64_t>> compute;
    for (int32_t id = 0; id < program.size(); ++id) {
        if (program.tasks[static_cast<size_t>(id)].stream != Stream::Compute || skipped(id)) continue;
        const core::TaskTime& t = timeline.tasks[static_cast<size_t>(id)];
        if (t.end_ns > t.start_ns) compute.emplace_back(t.start_ns, t.end_ns);
    }
    std::sort(compute.begin(), compute.end());
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& task = program.tasks[static_cast<size_t>(id)];
        if (task.kind != TaskKind::AllGather || task.unit < 0 || skipped(id)) continue;
        const core::TaskTime& ag = timeline.tasks[static_cast<size_t>(id)];
        // The step's first all-gather has no compute to hide behind (it follows the optimizer step):
        // all of it is exposed, and the smaller the first unit, the less.
        const int64_t a = ag.start_ns, b = ag.end_ns;
        if (b <= a) continue;
        int64_t covered = 0;
        auto it = std::upper_bound(compute.begin(), compute.end(), std::pair<int64_t, int64_t>{a, INT64_MIN});
        if (it != compute.begin()) --it;
        for (; it != compute.end() && it->first < b; ++it) covered += std::max<int64_t>(0, std::min(b, it->second) - std::max(a, it->first));
        out[static_cast<size_t>(task.unit)].wait_ns += (b - a) - covered;
    }
    return out;
}

Diagnosis diagnose(const core::Plan& plan, const HardwareProfile& profile, const core::Program& program,
                   const core::Timeline& predicted, const core::Timeline& measured, const std::vector<uint8_t>& skip,
                   const std::vector<RankStep>& rank_steps) {
    Diagnosis d;
    d.predicted_step_ns = predicted.step_ns;
    const std::vector<UnitTimes> p = unitTimes(program, predicted, {});
    const std::vector<UnitTimes> m = unitTimes(program, measured, skip);
    std::vector<uint8_t> complete(program.units.size(), 1);
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.unit >= 0 && !skip.empty() && skip[static_cast<size_t>(id)] != 0) complete[static_cast<size_t>(t.unit)] = 0;
    }
    for (size_t u = 0; u < program.units.size(); ++u) {
        UnitComparison c;
        c.unit = static_cast<int32_t>(u);
        c.name = program.units[u].name;
        c.predicted = p[u];
        c.measured = m[u];
        c.measured_complete = complete[u] != 0;
        c.forward_error = error(p[u].forward_ns, m[u].forward_ns, c.measured_complete);
        c.backward_error = error(p[u].backward_ns, m[u].backward_ns, c.measured_complete);
        c.all_gather_error = error(p[u].all_gather_ns, m[u].all_gather_ns, c.measured_complete);
        c.reduce_error = error(p[u].reduce_ns, m[u].reduce_ns, c.measured_complete);
        d.units.push_back(std::move(c));
    }
    std::stable_sort(d.units.begin(), d.units.end(),
                     [](const UnitComparison& a, const UnitComparison& b) { return a.worstError() > b.worstError(); });

    const int64_t threshold = std::max<int64_t>(kFindingFloorNs, static_cast<int64_t>(kFindingShareOfStep *
                                                                                       static_cast<double>(measured.step_ns)));
    std::vector<Finding> unshard;
    for (size_t u = 0; u < program.units.size(); ++u) {
        if (m[u].wait_ns >= threshold) {
            Finding f;
            f.kind = Finding::Kind::LazyUnshard;
            f.unit = static_cast<int32_t>(u);
            f.measured_ns = m[u].wait_ns;
            f.reference_ns = p[u].wait_ns;
            f.message = fmt::format("the compute stream waited {:.3f} ms for {}'s all-gathers (predicted {:.3f} ms): "
                                    "their prefetch came too late",
                                    ms(f.measured_ns), program.units[u].name, ms(f.reference_ns));
            unshard.push_back(std::move(f));
        }
        if (complete[u] != 0 && m[u].all_gather_ns > m[u].forward_ns + m[u].backward_ns && m[u].all_gather_ns >= threshold) {
            Finding f;
            f.kind = Finding::Kind::AllGatherExceedsCompute;
            f.unit = static_cast<int32_t>(u);
            f.measured_ns = m[u].all_gather_ns;
            f.reference_ns = m[u].forward_ns + m[u].backward_ns;
            f.message = fmt::format("{}'s all-gathers take {:.3f} ms, longer than its compute ({:.3f} ms): no prefetch "
                                    "can hide them",
                                    program.units[u].name, ms(f.measured_ns), ms(f.reference_ns));
            unshard.push_back(std::move(f));
        }
    }
    if (!unshard.empty()) {
        const std::vector<Remedy> remedies = unshardRemedies(plan, profile);
        for (Finding& f : unshard) {
            if (!remedies.empty() && remedies.front().step_ns < predicted.step_ns) {
                f.remedy = remedies.front().change;
                f.remedy_step_ns = remedies.front().step_ns;
            } else {
                f.remedy = "no plan change the model predicts faster that still fits (prefetch depth, smaller units, "
                           "SHARD_GRAD_OP, HSDP were tried)";
            }
        }
        d.findings = std::move(unshard);
    }
    if (rank_steps.size() > 1) {
        std::vector<int64_t> steps;
        for (const RankStep& r : rank_steps) steps.push_back(r.step_ns);
        std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>((steps.size() - 1) / 2), steps.end());
        const int64_t median = steps[(steps.size() - 1) / 2];
        for (const RankStep& r : rank_steps) {
            if (static_cast<double>(r.step_ns) <= (1.0 + kStragglerExcess) * static_cast<double>(median)) continue;
            Finding f;
            f.kind = Finding::Kind::Straggler;
            f.rank = r.rank;
            f.measured_ns = r.step_ns;
            f.reference_ns = median;
            f.message = fmt::format("rank {}'s step took {:.3f} ms, {:+.1f}% against the median rank's {:.3f} ms", r.rank,
                                    ms(r.step_ns), 100.0 * (static_cast<double>(r.step_ns) / static_cast<double>(median) - 1.0),
                                    ms(median));
            f.remedy = "no plan change: every rank runs the same Program; look at that rank's host (other load, clocks, "
                       "data loading)";
            d.findings.push_back(std::move(f));
        }
    }
    std::stable_sort(d.findings.begin(), d.findings.end(),
                     [](const Finding& a, const Finding& b) { return a.measured_ns - a.reference_ns > b.measured_ns - b.reference_ns; });
    return d;
}

nlohmann::json diagnosisUnitsToJson(const Diagnosis& d) {
    using json = nlohmann::json;
    json units = json::array();
    for (const UnitComparison& u : d.units) {
        const auto side = [](const UnitTimes& t) {
            return json{{"forward_ns", t.forward_ns}, {"backward_ns", t.backward_ns}, {"all_gather_ns", t.all_gather_ns},
                        {"reduce_ns", t.reduce_ns}, {"wait_ns", t.wait_ns}};
        };
        units.push_back({{"unit", u.name},
                         {"predicted", side(u.predicted)},
                         {"measured", side(u.measured)},
                         {"measured_complete", u.measured_complete},
                         {"forward_error", core::errorToJson(u.forward_error)},
                         {"backward_error", core::errorToJson(u.backward_error)},
                         {"all_gather_error", core::errorToJson(u.all_gather_error)},
                         {"reduce_error", core::errorToJson(u.reduce_error)}});
    }
    return units;
}

nlohmann::json diagnosisFindingsToJson(const Diagnosis& d, const core::Program& program) {
    using json = nlohmann::json;
    json out = json::array();
    for (const Finding& f : d.findings) {
        json j{{"kind", std::string(findingKindName(f.kind))},
               {"measured_ns", f.measured_ns},
               {"reference_ns", f.reference_ns},
               {"message", f.message},
               {"remedy", f.remedy}};
        if (f.unit >= 0) j["unit"] = program.units[static_cast<size_t>(f.unit)].name;
        if (f.rank >= 0) j["rank"] = f.rank;
        if (f.remedy_step_ns) {
            j["remedy_step_ns"] = *f.remedy_step_ns;
            j["remedy_gain_ns"] = d.predicted_step_ns - *f.remedy_step_ns;
        }
        out.push_back(std::move(j));
    }
    return out;
}

}  // namespace shardcast::sim
