// Diagnosis of a measured run (measured/diagnosis.hpp) on timelines made from a prediction with a
// known change, so each wait, finding and unit figure is known by construction.
#include "measured/diagnosis.hpp"

#include <memory>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model_io.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

core::Plan tinyPlan(core::WrapKind wrap) {
    auto m = core::resolveModel("tiny-llama");
    EXPECT_TRUE(m.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*m));
    plan.model_ref = "tiny-llama";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.gpus_per_node = 4;
    plan.training.seq_len = 512;
    plan.sharding.wrap.kind = wrap;
    return plan;
}

int32_t find(const core::Program& p, const std::string& unit, core::TaskKind kind) {
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.unit >= 0 && p.units[static_cast<size_t>(t.unit)].name == unit && t.kind == kind) return id;
    }
    return -1;
}

// The measured timeline: every task from `consumer` on in Program order moves `by` later, and the
// all-gather `ag` ends exactly when `consumer` now starts. The compute stream then waits from the end
// of its task before `consumer` to the all-gather's end, by construction.
core::Timeline delayedAllGather(const core::Program& p, const core::Timeline& predicted, int32_t ag, int32_t consumer,
                                int64_t by) {
    core::Timeline m = predicted;
    for (int32_t id = consumer; id < p.size(); ++id) {
        m.tasks[static_cast<size_t>(id)].start_ns += by;
        m.tasks[static_cast<size_t>(id)].end_ns += by;
    }
    m.tasks[static_cast<size_t>(ag)].end_ns = m.tasks[static_cast<size_t>(consumer)].start_ns;
    m.step_ns += by;
    return m;
}

TEST(DiagnosisTest, PredictionAgainstItselfHasZeroErrorsAndOnlyItsOwnWaits) {
    const core::Plan plan = tinyPlan(core::WrapKind::Block);
    auto e = evaluatePlan(plan, nullptr, {});
    ASSERT_TRUE(e);
    const Diagnosis d = diagnose(plan, e->profile, e->program, e->timeline, e->timeline, {}, {});
    // Findings of a prediction against itself are the prediction's own waits, nothing more.
    for (const Finding& f : d.findings) EXPECT_EQ(f.measured_ns, f.reference_ns);
    ASSERT_EQ(d.units.size(), e->program.units.size());
    for (const UnitComparison& u : d.units) {
        EXPECT_EQ(u.predicted, u.measured);
        EXPECT_EQ(u.worstError(), 0.0);
    }
}

// A plan's prediction and the first all-gather and copy-out of one of its units.
struct UnitUnshard {
    core::Plan plan;
    Evaluation e;
    int32_t ag = -1, copy_out = -1;
    UnitUnshard(core::WrapKind wrap, const std::string& unit) : plan(tinyPlan(wrap)) {
        auto r = evaluatePlan(plan, nullptr, {});
        EXPECT_TRUE(r);
        e = std::move(*r);
        ag = find(e.program, unit, core::TaskKind::AllGather);
        copy_out = find(e.program, unit, core::TaskKind::CopyOut);
    }
};

TEST(DiagnosisTest, ALateAllGatherIsALazyUnshardOfItsUnitWithTheWait) {
    const UnitUnshard u(core::WrapKind::Block, "model.layers.2");
    const core::Plan& plan = u.plan;
    const Evaluation* e = &u.e;
    const core::Program& p = e->program;
    const int32_t ag = u.ag, copy_out = u.copy_out;
    ASSERT_GE(ag, 0);
    ASSERT_GT(copy_out, ag);
    const std::vector<UnitTimes> before = unitTimes(p, e->timeline, {});
    const core::Timeline measured = delayedAllGather(p, e->timeline, ag, copy_out, 5'000'000);
    // An all-gather's exposure: its span less its overlap with compute-stream tasks (which do not
    // overlap one another).
    const auto exposure = [&](const core::Timeline& tl) {
        const core::TaskTime& a = tl.tasks[static_cast<size_t>(ag)];
        int64_t covered = 0;
        for (int32_t id = 0; id < p.size(); ++id) {
            if (p.tasks[static_cast<size_t>(id)].stream != core::Stream::Compute) continue;
            const core::TaskTime& c = tl.tasks[static_cast<size_t>(id)];
            covered += std::max<int64_t>(0, std::min(a.end_ns, c.end_ns) - std::max(a.start_ns, c.start_ns));
        }
        return a.durationNs() - covered;
    };
    const Diagnosis d = diagnose(plan, e->profile, p, e->timeline, measured, {}, {});
    const int32_t unit = p.tasks[static_cast<size_t>(ag)].unit;
    const std::vector<UnitTimes> after = unitTimes(p, measured, {});
    // Only this all-gather moved relative to compute: the unit's wait grows by its added exposure,
    // which covers the 5 ms the copy-out was held back.
    EXPECT_EQ(after[static_cast<size_t>(unit)].wait_ns - before[static_cast<size_t>(unit)].wait_ns,
              exposure(measured) - exposure(e->timeline));
    EXPECT_GE(exposure(measured), 5'000'000);
    ASSERT_FALSE(d.findings.empty());
    const Finding& f = d.findings.front();
    EXPECT_EQ(f.kind, Finding::Kind::LazyUnshard);
    EXPECT_EQ(f.unit, unit);
    EXPECT_EQ(f.measured_ns, after[static_cast<size_t>(unit)].wait_ns);
    EXPECT_FALSE(f.remedy.empty());
    // The unit table puts this unit's all-gather error first: its AG is the only figure off.
    EXPECT_EQ(d.units.front().name, "model.layers.2");
    ASSERT_TRUE(d.units.front().all_gather_error);
    EXPECT_LT(*d.units.front().all_gather_error, 0);
    const nlohmann::json j = diagnosisFindingsToJson(d, p);
    EXPECT_EQ(j[0]["kind"], "lazy_unshard");
    EXPECT_EQ(j[0]["unit"], "model.layers.2");
}

TEST(DiagnosisTest, AStragglerIsTheRankOverTheMedianByMoreThanFivePercent) {
    const core::Plan plan = tinyPlan(core::WrapKind::Block);
    auto e = evaluatePlan(plan, nullptr, {});
    ASSERT_TRUE(e);
    const Diagnosis d = diagnose(plan, e->profile, e->program, e->timeline, e->timeline, {},
                                 {RankStep{0, 100'000'000}, RankStep{1, 104'000'000}, RankStep{2, 100'000'000},
                                  RankStep{3, 120'000'000}});
    std::vector<Finding> stragglers;
    for (const Finding& f : d.findings) {
        if (f.kind == Finding::Kind::Straggler) stragglers.push_back(f);
    }
    ASSERT_EQ(stragglers.size(), 1u);  // 104 ms is within 5% of the median, 120 ms is not
    EXPECT_EQ(stragglers[0].rank, 3);
    EXPECT_EQ(stragglers[0].reference_ns, 100'000'000);  // the median of 100, 100, 104, 120 (lower middle)
}

TEST(DiagnosisTest, WholeModelUnitGetsSmallerUnitsOrDeeperPrefetchAsItsRemedy) {
    const UnitUnshard u(core::WrapKind::Whole, "(root)");
    const core::Plan& plan = u.plan;
    const Evaluation* e = &u.e;
    const core::Program& p = e->program;
    const int32_t ag = u.ag, copy_out = u.copy_out;
    ASSERT_GE(ag, 0);
    const core::Timeline measured = delayedAllGather(p, e->timeline, ag, copy_out, 50'000'000);
    const Diagnosis d = diagnose(plan, e->profile, p, e->timeline, measured, {}, {});
    ASSERT_FALSE(d.findings.empty());
    // Whatever the model prefers, the remedy it names is predicted faster than the plan.
    for (const Finding& f : d.findings) {
        if (f.remedy_step_ns) {
            EXPECT_LT(*f.remedy_step_ns, e->timeline.step_ns);
        }
    }
}

}  // namespace
}  // namespace shardcast::sim
