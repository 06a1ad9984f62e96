// sim::optimize against exhaustive enumeration: every configuration of a space small enough to
// evaluate one by one (each through its own sim::evaluatePlan, not the optimizer's search loop).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"
#include "search/optimize.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

core::Plan basePlan(const char* model_name, int nodes, int64_t seq_len) {
    return testing::h100Plan(model_name, nodes, seq_len);
}

core::WrapPolicy wrap(const char* text) { return *core::parseWrapPolicy(text, "test"); }

std::string labelOf(const OptimizeChoice& c) {
    std::string s;
    for (int d = 0; d < kOptimizeDimensionCount; ++d) s += choiceValue(c, static_cast<OptimizeDimension>(d)) + " | ";
    return s;
}

struct Exhaustive {
    std::vector<OptimizeChoice> choices;
    std::vector<bool> valid;
    std::vector<Evaluation> evals;
};

// Every configuration, evaluated on its own; also checks the bounds on each.
Exhaustive enumerateAll(const core::Plan& base, const OptimizeSpace& space, int64_t global_batch,
                        const HardwareProfile& profile, double headroom) {
    Exhaustive ex;
    auto choices = enumerateSpace(base, space, global_batch);
    EXPECT_TRUE(choices) << choices.error().message;
    ex.choices = *choices;
    EvaluationOptions eo;
    eo.headroom = headroom;
    eo.per_unit = false;
    // The premise that lets the search compute each part once: the group part is the same for
    // every configuration of its (micro-batch, checkpointing) group, the sharding part for every
    // configuration of its sharding and accumulation count.
    std::map<std::string, GroupBoundPart> group_part;
    std::map<std::string, ShardingBoundPart> sharding_part;
    std::map<std::string, int64_t> initial_bytes;
    for (const OptimizeChoice& c : ex.choices) {
        const core::Plan plan = applyChoice(base, c);
        auto e = evaluatePlan(plan, &profile, eo);
        ex.valid.push_back(static_cast<bool>(e));
        ex.evals.push_back(e ? *e : Evaluation{});
        if (!e) continue;
        auto bound = configurationBounds(plan, profile);
        EXPECT_TRUE(bound) << bound.error().message;
        // The bounds hold for this configuration ...
        EXPECT_LE(bound->step_ns, e->timeline.step_ns) << labelOf(c);
        EXPECT_LE(bound->peak_bytes, judgedPeakBytes(e->fit)) << labelOf(c);
        EXPECT_GT(bound->step_ns, 0) << labelOf(c);
        EXPECT_GT(bound->peak_bytes, 0) << labelOf(c);
        // ... and their parts are shared as the search assumes.
        auto parts = boundParts(plan, profile);
        EXPECT_TRUE(parts) << parts.error().message;
        if (!parts) continue;
        // Each tensor-parallel degree is a space of its own (its groups' parts differ).
        const std::string group_key = choiceValue(c, OptimizeDimension::MicroBatch) + choiceValue(c, OptimizeDimension::Ac) +
                                      " tp " + choiceValue(c, OptimizeDimension::Tp) + " pp " +
                                      choiceValue(c, OptimizeDimension::Pp);
        std::string sharding_key = choiceValue(c, OptimizeDimension::MicroBatch);
        for (int d = 0; d < kOptimizeDimensionCount; ++d) {
            const auto dim = static_cast<OptimizeDimension>(d);
            if (dim != OptimizeDimension::Ac && dim != OptimizeDimension::MicroBatch && dim != OptimizeDimension::Prefetch) sharding_key += " | " + choiceValue(c, dim);
        }
        auto [g, g_new] = group_part.try_emplace(group_key, parts->group);
        if (!g_new) {
            EXPECT_EQ(g->second, parts->group) << labelOf(c);
        }
        // Program::initial does not depend on the micro-batches either.
        const std::string class_key = sharding_key.substr(sharding_key.find(" | "));
        auto [init, init_new] = initial_bytes.try_emplace(class_key, parts->sharding.initial_bytes);
        if (!init_new) {
            EXPECT_EQ(init->second, parts->sharding.initial_bytes) << labelOf(c);
        }
        auto [s, s_new] = sharding_part.try_emplace(sharding_key, parts->sharding);
        if (!s_new) {
            EXPECT_EQ(s->second, parts->sharding) << labelOf(c);
        }
    }
    return ex;
}

// Indices of fitting configurations, fastest first; ties by peak then enumeration order.
std::vector<size_t> ranking(const Exhaustive& ex) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < ex.choices.size(); ++i) {
        if (ex.valid[i] && ex.evals[i].fit.fits) idx.push_back(i);
    }
    std::stable_sort(idx.begin(), idx.end(), [&ex](size_t a, size_t b) {
        const auto& ea = ex.evals[a];
        const auto& eb = ex.evals[b];
        if (ea.timeline.step_ns != eb.timeline.step_ns) return ea.timeline.step_ns < eb.timeline.step_ns;
        return judgedPeakBytes(ea.fit) < judgedPeakBytes(eb.fit);
    });
    return idx;
}

void expectSameAnswer(const core::Plan& base, const OptimizeSpace& space, int64_t global_batch, int top) {
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    const double headroom = core::kDefaultHeadroom;
    const Exhaustive ex = enumerateAll(base, space, global_batch, profile, headroom);
    const std::vector<size_t> rank = ranking(ex);
    ASSERT_FALSE(rank.empty()) << "the test space should hold fitting configurations";
    ASSERT_LT(rank.size(), ex.choices.size()) << "the test space should also hold configurations that do not fit";

    OptimizeOptions options;
    options.global_batch = global_batch;
    options.headroom = headroom;
    options.top = top;
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->space_size, ex.choices.size());
    EXPECT_FALSE(r->bound_restarted);
    EXPECT_GT(r->pruned, 0u) << "the bound should prune on this space";
    EXPECT_EQ(r->evaluated + r->pruned, r->space_size);
    EXPECT_EQ(r->stats.pruned_by_memory + r->stats.pruned_by_time, r->pruned);
    EXPECT_GT(r->stats.bound_programs, 0u);
    ASSERT_TRUE(r->fits);

    // Same optimum, same score.
    const Evaluation& best = ex.evals[rank.front()];
    EXPECT_EQ(labelOf(r->best.choice), labelOf(ex.choices[rank.front()]));
    EXPECT_DOUBLE_EQ(r->best.step_s, static_cast<double>(best.timeline.step_ns) * 1e-9);
    EXPECT_EQ(r->best.peak_bytes, judgedPeakBytes(best.fit));
    EXPECT_DOUBLE_EQ(r->best.tokens_per_s_per_gpu, best.summary.tokens_per_s_per_gpu);
    // Same top T.
    ASSERT_EQ(r->top.size(), std::min<size_t>(static_cast<size_t>(top), rank.size()));
    for (size_t i = 0; i < r->top.size(); ++i) {
        EXPECT_EQ(labelOf(r->top[i].choice), labelOf(ex.choices[rank[i]])) << "rank " << i;
        EXPECT_DOUBLE_EQ(r->top[i].step_s, static_cast<double>(ex.evals[rank[i]].timeline.step_ns) * 1e-9);
    }

    // The front: exact within the cut-off. Every fitting configuration up to it is dominated by (or
    // equal to) a front entry, and no fitting configuration strictly dominates a front entry.
    const int64_t cutoff_ns = r->cutoff_step_s > 0 ? static_cast<int64_t>(r->cutoff_step_s * 1e9 + 0.5) : INT64_MAX;
    ASSERT_FALSE(r->front.empty());
    for (size_t i : rank) {
        const int64_t step = ex.evals[i].timeline.step_ns, peak = judgedPeakBytes(ex.evals[i].fit);
        bool covered = false;
        for (const OptimizeEntry& f : r->front) {
            const auto fstep = static_cast<int64_t>(f.step_s * 1e9 + 0.5);
            EXPECT_FALSE(peak <= f.peak_bytes && step <= fstep && (peak < f.peak_bytes || step < fstep))
                << labelOf(ex.choices[i]) << " dominates front entry " << labelOf(f.choice);
            covered = covered || (f.peak_bytes <= peak && fstep <= step);
        }
        if (step < cutoff_ns) {
            EXPECT_TRUE(covered) << labelOf(ex.choices[i]);
        }
    }

    // One loss per other choice of every dimension that has more than one, each exactly the best
    // fitting configuration with that choice.
    size_t other_choices = 0;
    for (int d = 0; d < kOptimizeDimensionCount; ++d) {
        std::set<std::string> values;
        for (const OptimizeChoice& c : ex.choices) values.insert(lossValue(c, static_cast<OptimizeDimension>(d)));
        if (values.size() > 1) other_choices += values.size() - 1;
    }
    EXPECT_EQ(r->losses.size(), other_choices);
    for (const DimensionLoss& l : r->losses) {
        double exhaustive_best = 0;
        for (size_t i : rank) {
            if (lossValue(ex.choices[i], l.dimension) == l.value) {
                exhaustive_best = static_cast<double>(ex.evals[i].timeline.step_ns) * 1e-9;
                if (l.fits) {
                    EXPECT_EQ(choiceValue(ex.choices[i], l.dimension), l.best_value) << l.value;
                }
                break;
            }
        }
        if (l.fits) {
            EXPECT_DOUBLE_EQ(l.step_s, exhaustive_best) << dimensionName(l.dimension) << " " << l.value;
            EXPECT_LE(l.change, 0.0);
        } else {
            EXPECT_EQ(exhaustive_best, 0.0) << l.value;
        }
    }
}

// Llama-3.1-8B on 8 H100s, sequences of 8,192, 4 per rank: DDP's 128 GB of model states and
// micro-batches of 4 without checkpointing do not fit; sharded configurations do.
TEST(OptimizeTest, MatchesExhaustiveEnumerationLlama8BOn8Gpus) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 8192);
    OptimizeSpace space;
    space.wraps = {wrap("every:8"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Op, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2, 1};
    // Hand count: NO_SHARD 2 flavours x 2 wraps = 4; SHARD_GRAD_OP and FULL_SHARD (FSDP2 2 prefetch
    // + FSDP1 4 prefetch) x 2 offload x 2 wraps = 24 each; the hybrids 2 shard sizes (2, 4) x 24 = 48
    // each: 148 shardings; micro-batch 1, 2, 4 x 3 modes = 9 groups.
    auto all = enumerateSpace(base, space, 32);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 148u * 9u);
    expectSameAnswer(base, space, 32, 5);
}

// 16 GPUs on 2 nodes: hybrid shard groups of 2, 4 and 8, and FULL_SHARD's partial reshard to 8.
TEST(OptimizeTest, MatchesExhaustiveEnumerationLlama8BOn16Gpus) {
    const core::Plan base = basePlan("llama-3.1-8b", 2, 8192);
    OptimizeSpace space;
    space.wraps = {wrap("every:8"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2};
    space.offloads = {core::Offload::None};
    // FSDP2 only, no offload, 2 prefetch depths x 2 wraps = 4 per (strategy, shard, reshard):
    // NO_SHARD 2 (one prefetch), SHARD_GRAD_OP 4, FULL_SHARD 8 (reshard per strategy or to 8),
    // HYBRID_SHARD 3 shard sizes x 4 = 12, _HYBRID_SHARD_ZERO2 12: 38; micro-batch 1, 2, 4 x 2 modes.
    auto all = enumerateSpace(base, space, 64);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 38u * 6u);
    expectSameAnswer(base, space, 64, 3);
}

// Tensor parallelism as a dimension (issue 25): Llama-3.1-8B on 8 H100s at 8,192 tokens, tp 1 and
// 2. At tp 2 the space is FSDP2 without offload over 4 data-parallel ranks: FULL_SHARD and
// SHARD_GRAD_OP (2 prefetch depths x 2 wraps = 4 each), the hybrids over shard 2 (4 each): 16
// shardings; micro-batch 1, 2, 4, 8 (8 sequences per dp rank) x 2 modes = 8 groups. tp 1: NO_SHARD
// 2 wraps, FULL_SHARD and SHARD_GRAD_OP 4 each, the hybrids over shard 2 and 4 (8 each): 26
// shardings; micro-batch 1, 2, 4 x 2 modes = 6 groups.
TEST(OptimizeTest, TensorParallelDegreesMatchExhaustiveEnumeration) {
    core::Plan base = basePlan("llama-3.1-8b", 1, 8192);
    OptimizeSpace space;
    space.wraps = {wrap("every:8"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2};
    space.offloads = {core::Offload::None};
    space.tps = {1, 2};
    auto all = enumerateSpace(base, space, 32);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 26u * 6u + 16u * 8u);
    expectSameAnswer(base, space, 32, 5);
}

// A pipeline space small enough to enumerate: per-block units, checkpointing none or full, FSDP2,
// no offload, one prefetch and reshard choice.
OptimizeSpace smallPipelineSpace() {
    OptimizeSpace space;
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2};
    space.offloads = {core::Offload::None};
    space.prefetch = false;
    space.partial_reshard = false;
    return space;
}

// Every fitting choice's step (ns) and label, fastest first: exhaustive enumeration's answer.
std::vector<std::pair<int64_t, std::string>> fittingByStep(const core::Plan& base, const std::vector<OptimizeChoice>& all,
                                                           const HardwareProfile& profile) {
    EvaluationOptions eo;
    eo.per_unit = false;
    std::vector<std::pair<int64_t, std::string>> fitting;
    for (const OptimizeChoice& c : all) {
        auto e = evaluatePlan(applyChoice(base, c), &profile, eo);
        if (e && e->fit.fits) fitting.emplace_back(e->timeline.step_ns, labelOf(c));
    }
    std::stable_sort(fitting.begin(), fitting.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return fitting;
}

// Pipeline stage counts: the pp 1 space is searched with its bounds, the pp 2 space evaluated whole
// (1F1B, so grad accumulation below 2 is refused there); the merged answer is the one exhaustive
// enumeration gives: the fastest fitting configuration and the top 5 step times.
TEST(OptimizeTest, PipelineStagesMatchExhaustiveEnumeration) {
    core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    base.model = testing::scaledModel("llama-3.1-8b", 8);
    OptimizeSpace space = smallPipelineSpace();
    space.strategies = {core::Strategy::FullShard, core::Strategy::ShardGradOp};
    space.pps = {1, 2};
    const int64_t global_batch = 32;
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    auto all = enumerateSpace(base, space, global_batch);
    ASSERT_TRUE(all) << all.error().message;
    int pp2 = 0;
    for (const OptimizeChoice& c : *all) pp2 += c.pp == 2 ? 1 : 0;
    ASSERT_GT(pp2, 0);
    const auto fitting = fittingByStep(base, *all, profile);
    ASSERT_GE(fitting.size(), 5u);
    OptimizeOptions options;
    options.global_batch = global_batch;
    options.top = 5;
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->fits);
    EXPECT_EQ(r->space_size, all->size());
    EXPECT_EQ(static_cast<int64_t>(std::llround(r->best.step_s * 1e9)), fitting.front().first);
    ASSERT_EQ(r->top.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(static_cast<int64_t>(std::llround(r->top[i].step_s * 1e9)), fitting[i].first) << "rank " << i;
    }
    // The losses name the pp dimension.
    bool pp_loss = false;
    for (const DimensionLoss& l : r->losses) pp_loss = pp_loss || l.dimension == OptimizeDimension::Pp;
    EXPECT_TRUE(pp_loss);
}

// Pipeline schedules as a dimension: with pp 2 every schedule's space is evaluated whole and the
// merged answer is exhaustive enumeration's; the losses price each schedule under the pp dimension.
TEST(OptimizeTest, PipelineSchedulesMatchExhaustiveEnumeration) {
    core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    base.model = testing::scaledModel("llama-3.1-8b", 8);
    OptimizeSpace space = smallPipelineSpace();
    space.strategies = {core::Strategy::FullShard};
    space.pps = {2};
    auto sched = [](const char* text) { return *parsePipelineScheduleChoice(text); };
    space.pp_schedules = {sched("1F1B"), sched("GPipe"), sched("Interleaved1F1B:2")};
    const int64_t global_batch = 32;
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    auto all = enumerateSpace(base, space, global_batch);
    ASSERT_TRUE(all) << all.error().message;
    int interleaved = 0;
    for (const OptimizeChoice& c : *all) interleaved += c.pp_schedule == core::PpSchedule::Interleaved1F1B ? 1 : 0;
    ASSERT_GT(interleaved, 0);
    const auto fitting = fittingByStep(base, *all, profile);
    ASSERT_GE(fitting.size(), 3u);
    OptimizeOptions options;
    options.global_batch = global_batch;
    options.top = 3;
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->space_size, all->size());
    EXPECT_EQ(static_cast<int64_t>(std::llround(r->best.step_s * 1e9)), fitting.front().first);
    for (size_t i = 0; i < r->top.size(); ++i) {
        EXPECT_EQ(static_cast<int64_t>(std::llround(r->top[i].step_s * 1e9)), fitting[i].first) << "rank " << i;
    }
    std::set<std::string> priced;
    for (const DimensionLoss& l : r->losses) {
        if (l.dimension == OptimizeDimension::Pp) priced.insert(l.value);
    }
    priced.insert(choiceValue(r->best.choice, OptimizeDimension::Pp));
    EXPECT_EQ(priced, (std::set<std::string>{"2", "2 GPipe", "2 Interleaved1F1B:2"}));
    // Bad schedule texts name what is valid.
    EXPECT_FALSE(parsePipelineScheduleChoice("Interleaved1F1B").ok());
    EXPECT_FALSE(parsePipelineScheduleChoice("GPipe:2").ok());
    EXPECT_FALSE(parsePipelineScheduleChoice("Interleaved1F1B:1").ok());
    EXPECT_NE(parsePipelineScheduleChoice("zb").error().message.find("valid: GPipe, 1F1B or Interleaved1F1B:V"),
              std::string::npos);
}

// Pipeline spaces searched with their bounds (the first rank's parts and micro-batch 0's chain
// through the stages): every configuration's bounds hold and its parts are shared as the search
// assumes (enumerateAll), the search prunes, and its answer is exhaustive enumeration's, with 1F1B
// and Interleaved1F1B (2 stages per rank) each a space of its own.
TEST(OptimizeTest, PipelineSpacesPruneAndMatchExhaustiveEnumeration) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 8192);
    OptimizeSpace space;
    space.wraps = {wrap("every:4"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2};
    space.offloads = {core::Offload::None};
    space.prefetch = false;
    space.partial_reshard = false;
    space.pps = {2};
    space.pp_schedules = {*parsePipelineScheduleChoice("1F1B"), *parsePipelineScheduleChoice("Interleaved1F1B:2")};
    expectSameAnswer(base, space, 32, 5);
}

// The chain through the pipeline bounds the step on its own: on a pipeline rank's Programs it is
// more than the first rank's kernels (the bubble), and at most the simulated step.
TEST(OptimizeTest, PipelineChainBoundsTheStepWithItsBubble) {
    core::Plan plan = basePlan("llama-3.1-8b", 1, 8192);
    plan.sharding.pp = 4;
    plan.training.grad_accum = 4;
    plan.training.micro_batch = 1;
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    auto parts = boundParts(plan, profile);
    ASSERT_TRUE(parts) << parts.error().message;
    EvaluationOptions eo;
    eo.per_unit = false;
    auto e = evaluatePlan(plan, &profile, eo);
    ASSERT_TRUE(e) << e.error().message;
    // 1F1B with as many micro-batches as stages: rank 0 runs 4 forwards and 4 backwards, and the
    // chain adds the other 3 stages' forward and backward of micro-batch 0, so it is at least 1.5 x
    // rank 0's kernels when each stage holds a quarter of the blocks (8 of 32; the embedding and the
    // output make the ends a little heavier).
    EXPECT_GT(parts->group.pipeline_ns, parts->group.kernels_ns * 3 / 2);
    EXPECT_LE(parts->group.pipeline_ns, e->timeline.step_ns);
    auto bound = configurationBounds(plan, profile);
    ASSERT_TRUE(bound);
    EXPECT_GE(bound->step_ns, parts->group.pipeline_ns * 99 / 100);
}

// A stage count the model or the world cannot take is refused by name.
TEST(OptimizeTest, RefusesAnInvalidPipelineStageCount) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    OptimizeSpace space;
    space.pps = {1, 3};
    OptimizeOptions options;
    options.global_batch = 16;
    auto r = optimize(base, space, HardwareProfile::fromCluster(base.cluster), options);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("--pp 3"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("must divide the world size 8"), std::string::npos) << r.error().message;
}

// Where data parallelism alone is fastest the search keeps it: Llama-3.1-8B on 8 GPUs at 4,096
// tokens, 2 sequences per GPU, with tp 1, 2, 4 and 8 allowed.
TEST(OptimizeTest, PrefersPureFsdpWhereItIsFastest) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    OptimizeSpace space;
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.tps = {1, 2, 4, 8};
    OptimizeOptions options;
    options.global_batch = 16;
    auto r = optimize(base, space, HardwareProfile::fromCluster(base.cluster), options);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->fits);
    EXPECT_EQ(r->best.choice.tp, 1);
    bool tp_loss = false;
    for (const DimensionLoss& l : r->losses) {
        if (l.dimension != OptimizeDimension::Tp) continue;
        tp_loss = true;
        EXPECT_LT(l.change, 0) << "tp " << l.value;
    }
    EXPECT_TRUE(tp_loss);
}

// A degree that does not divide the heads or the GPUs per node is refused by name.
TEST(OptimizeTest, RefusesAnInvalidTensorParallelDegree) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    OptimizeSpace space;
    space.tps = {1, 3};
    OptimizeOptions options;
    options.global_batch = 16;
    auto r = optimize(base, space, HardwareProfile::fromCluster(base.cluster), options);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("--tp 3"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("valid: 1, 2, 4, 8"), std::string::npos) << r.error().message;
}

// Llama-3.1-70B FULL_SHARD on 8 H100s: model states alone are 70.6e9 x 16 B / 8 = 141 GB per GPU.
TEST(OptimizeTest, NoFitNamesTheClosestConfigurationAndHowFarItMisses) {
    const core::Plan base = basePlan("llama-3.1-70b", 1, 4096);
    OptimizeSpace space;
    space.strategies = {core::Strategy::FullShard, core::Strategy::ShardGradOp};
    space.fsdp_versions = {2};
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::Full, 1}};
    space.offloads = {core::Offload::None};
    space.prefetch = false;
    OptimizeOptions options;
    options.global_batch = 8;
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(r->fits);
    EXPECT_TRUE(r->top.empty());
    EXPECT_TRUE(r->front.empty());
    // The closest is the one with the smallest overshoot: FULL_SHARD shards more than SHARD_GRAD_OP.
    EXPECT_EQ(r->best.choice.strategy, core::Strategy::FullShard);
    // The same as enumeration finds (the memory bound may prune, never change the answer).
    const Exhaustive ex = enumerateAll(base, space, 8, profile, core::kDefaultHeadroom);
    size_t closest = 0;
    for (size_t i = 1; i < ex.choices.size(); ++i) {
        const int64_t over = judgedPeakBytes(ex.evals[i].fit) - ex.evals[i].fit.budget_bytes;
        if (over < judgedPeakBytes(ex.evals[closest].fit) - ex.evals[closest].fit.budget_bytes) closest = i;
    }
    EXPECT_EQ(labelOf(r->best.choice), labelOf(ex.choices[closest]));
    EXPECT_EQ(r->best.peak_bytes, judgedPeakBytes(ex.evals[closest].fit));
    EXPECT_GT(r->best.peak_bytes, r->best.budget_bytes);
    EXPECT_GT(r->best.peak_bytes, 141'000'000'000 - 16 * core::kGiB);  // model states, less slack
    EXPECT_NE(r->no_fit.find("over"), std::string::npos) << r->no_fit;
    EXPECT_NE(r->no_fit.find("more GPUs"), std::string::npos) << r->no_fit;
    EXPECT_NE(r->no_fit.find("CPU offload"), std::string::npos) << r->no_fit;
}

// A bound that claims more than the simulator gives (here: every step bound raised by 1,000 s in
// the self-check) is caught on the first configuration evaluated; the search then evaluates the
// whole space and still answers as the pruned search does.
TEST(OptimizeTest, AWrongBoundIsCaughtAndTheSearchRestartsWithoutPruning) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 8192);
    OptimizeSpace space;
    space.wraps = {wrap("every:8"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.fsdp_versions = {2};
    space.offloads = {core::Offload::None};
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    OptimizeOptions options;
    options.global_batch = 32;
    options.top = 3;
    auto pruned = optimize(base, space, profile, options);
    ASSERT_TRUE(pruned) << pruned.error().message;
    EXPECT_FALSE(pruned->bound_restarted);
    EXPECT_GT(pruned->pruned, 0u);

    options.bound_error_ns = 1'000'000'000'000;
    auto restarted = optimize(base, space, profile, options);
    ASSERT_TRUE(restarted) << restarted.error().message;
    EXPECT_TRUE(restarted->bound_restarted);
    EXPECT_EQ(restarted->evaluated, restarted->space_size);
    EXPECT_EQ(restarted->pruned, 0u);
    EXPECT_EQ(restarted->stats.bound_programs, 0u);
    ASSERT_EQ(restarted->top.size(), pruned->top.size());
    for (size_t i = 0; i < pruned->top.size(); ++i) {
        EXPECT_EQ(labelOf(restarted->top[i].choice), labelOf(pruned->top[i].choice));
        EXPECT_EQ(restarted->top[i].step_s, pruned->top[i].step_s);
    }
    EXPECT_EQ(restarted->losses.size(), pruned->losses.size());
}

// The README example's plan (Llama-3.1-8B, FULL_SHARD FSDP2 per block, 8 H100s) at 11,264 tokens
// per sequence, one per rank: the README shows that with layer:2 checkpointing its allocated peak
// (65.81 GiB) fits the 75.67 GiB budget but its reserved peak (77.87 GiB) does not (AT RISK), and
// without checkpointing even the allocated peak does not fit. So the fastest configuration whose
// allocated peak fits is at risk, and the answer is the next one: full checkpointing. An optimizer
// that judged fit on the allocated peak alone would pick layer:2.
TEST(OptimizeTest, TheFastestAllocatedFitIsAtRiskSoTheNextOneWins) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 11264);
    OptimizeSpace space;
    space.strategies = {core::Strategy::FullShard};
    space.fsdp_versions = {2};
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Layer, 2}, {core::Checkpointing::Full, 1}};
    space.offloads = {core::Offload::None};
    space.prefetch = false;
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    OptimizeOptions options;
    options.global_batch = 8;
    options.top = 3;
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->space_size, 3u);
    ASSERT_TRUE(r->fits);
    EXPECT_EQ(r->best.choice.ac.mode, core::Checkpointing::Full);
    ASSERT_EQ(r->top.size(), 1u) << "only full checkpointing fits";

    // What each configuration is, evaluated on its own (with and without the allocator model).
    auto evaluate = [&](core::Checkpointing mode, int every, bool reserved) {
        OptimizeChoice c = r->best.choice;
        c.ac = {mode, every};
        EvaluationOptions eo;
        eo.reserved_memory = reserved;
        auto e = evaluatePlan(applyChoice(base, c), &profile, eo);
        EXPECT_TRUE(e) << e.error().message;
        return *e;
    };
    const Evaluation layer2 = evaluate(core::Checkpointing::Layer, 2, true);
    EXPECT_TRUE(layer2.fit.at_risk) << "allocated " << layer2.fit.peak_bytes << ", reserved " << layer2.fit.reserved_bytes;
    EXPECT_FALSE(layer2.fit.fits);
    EXPECT_TRUE(evaluate(core::Checkpointing::Layer, 2, false).fit.fits) << "on allocated memory alone it fits";
    EXPECT_LT(layer2.timeline.step_ns, static_cast<int64_t>(r->best.step_s * 1e9 + 0.5)) << "and it is faster";
    const Evaluation none = evaluate(core::Checkpointing::None, 1, false);
    EXPECT_FALSE(none.fit.fits) << "no checkpointing misses on allocated memory already";
    const Evaluation full = evaluate(core::Checkpointing::Full, 1, true);
    EXPECT_TRUE(full.fit.fits);
    EXPECT_EQ(r->best.peak_bytes, judgedPeakBytes(full.fit));

    // The at-risk configuration is reported: its own loss row says nothing with layer:2 fits.
    bool layer2_row = false;
    for (const DimensionLoss& l : r->losses) {
        if (l.dimension == OptimizeDimension::Ac && l.value == "layer:2") {
            layer2_row = true;
            EXPECT_FALSE(l.fits);
        }
    }
    EXPECT_TRUE(layer2_row);
    // Replayed: full (the winner), and layer:2 unless the per-stream floor already rules it out;
    // never none, whose allocated peak misses.
    EXPECT_GE(r->stats.reserved_replays, 1u);
    EXPECT_LE(r->stats.reserved_replays, 2u);
    ASSERT_EQ(r->at_risk.size(), 1u);
    const OptimizeEntry& risk = r->at_risk.front();
    EXPECT_EQ(risk.choice.ac.mode, core::Checkpointing::Layer);
    EXPECT_EQ(risk.allocated_bytes, layer2.fit.peak_bytes);
    EXPECT_GT(risk.peak_bytes, risk.budget_bytes);
    if (risk.peak_is_bound) {
        EXPECT_LE(risk.peak_bytes, judgedPeakBytes(layer2.fit));
    } else {
        EXPECT_EQ(risk.peak_bytes, judgedPeakBytes(layer2.fit));
    }
}

// The allocator is replayed only where the answer needs it: far fewer replays than evaluations,
// with the same answer as exhaustive enumeration (MatchesExhaustiveEnumeration*); without pruning,
// every valid configuration is replayed (the reference).
TEST(OptimizeTest, ReplaysTheAllocatorOnlyWhereTheAnswerNeedsIt) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 8192);
    OptimizeSpace space;  // no offload: small enough to replay everything in a sanitized build
    space.wraps = {wrap("every:8"), wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Op, 1}, {core::Checkpointing::Full, 1}};
    space.offloads = {core::Offload::None};
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    OptimizeOptions options;
    options.global_batch = 32;
    auto lazy = optimize(base, space, profile, options);
    ASSERT_TRUE(lazy) << lazy.error().message;
    ASSERT_TRUE(lazy->fits);
    // At least the top and the front were replayed; fewer than half of what was evaluated (69 of
    // 188 when written, of 684 configurations).
    EXPECT_GE(lazy->stats.reserved_replays, lazy->top.size());
    EXPECT_GE(lazy->stats.reserved_replays, lazy->front.size());
    EXPECT_LT(lazy->stats.reserved_replays * 2, lazy->evaluated);
    EXPECT_LE(lazy->stats.reevaluations, lazy->stats.reserved_replays);

    options.prune = false;
    auto eager = optimize(base, space, profile, options);
    ASSERT_TRUE(eager) << eager.error().message;
    EXPECT_EQ(eager->evaluated, eager->space_size);
    EXPECT_EQ(eager->stats.reserved_replays, eager->evaluated - eager->invalid);
    EXPECT_EQ(eager->stats.reevaluations, 0u);
    EXPECT_EQ(labelOf(eager->best.choice), labelOf(lazy->best.choice));
    EXPECT_EQ(eager->best.peak_bytes, lazy->best.peak_bytes);
    ASSERT_EQ(eager->front.size(), lazy->front.size());
    for (size_t i = 0; i < lazy->front.size(); ++i) {
        EXPECT_EQ(labelOf(eager->front[i].choice), labelOf(lazy->front[i].choice)) << i;
        EXPECT_EQ(eager->front[i].peak_bytes, lazy->front[i].peak_bytes) << i;
    }
    EXPECT_FALSE(lazy->at_risk.empty()) << "the space has faster configurations at risk (6 when written)";
    ASSERT_EQ(eager->at_risk.size(), lazy->at_risk.size());
    for (size_t i = 0; i < lazy->at_risk.size(); ++i) {
        EXPECT_EQ(labelOf(eager->at_risk[i].choice), labelOf(lazy->at_risk[i].choice)) << i;
    }
}

TEST(OptimizeTest, RefusesABatchThatDoesNotSplitOverTheRanks) {
    const core::Plan base = basePlan("llama-3.1-8b", 2, 4096);
    OptimizeOptions options;
    options.global_batch = 24;  // 16 ranks
    auto r = optimize(base, OptimizeSpace{}, HardwareProfile::fromCluster(base.cluster), options);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("--global-batch 24"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("16 ranks"), std::string::npos) << r.error().message;
}

TEST(OptimizeTest, StopsWhenCancelled) {
    const core::Plan base = basePlan("llama-3.1-8b", 1, 4096);
    CancelToken token;
    token.cancel();
    OptimizeOptions options;
    options.global_batch = 8;
    options.cancel = &token;
    auto r = optimize(base, OptimizeSpace{}, HardwareProfile::fromCluster(base.cluster), options);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().cancelled);
}

// Llama-3.1-8B cut to 4 blocks (--scale layers=4: embeddings, head and block shapes kept), 8 H100s,
// sequences of 32,768 tokens: activations dominate, so checkpointing decides what fits.
core::Plan fourBlockPlan() {
    core::Plan plan = basePlan("llama-3.1-8b", 1, 32768);
    core::ModelScale scale;
    scale.layers = 4;
    auto scaled = core::scaleModel(*plan.model, scale);
    EXPECT_TRUE(scaled) << scaled.error().message;
    plan.model = std::make_shared<const core::Model>(std::move(*scaled));
    plan.scale = scale;
    return plan;
}

// The first-N family (--ac-per-block) is searched as exactly as the whole-model modes: the same
// optimum, score, top, front and losses as evaluating every configuration, on every N of every
// pair (3 pairs x N = 1..3) next to none, op and full.
TEST(OptimizeTest, FirstNFamilyMatchesExhaustiveEnumeration) {
    const core::Plan base = fourBlockPlan();
    OptimizeSpace space;
    space.strategies = {core::Strategy::FullShard, core::Strategy::ShardGradOp};
    space.fsdp_versions = {2};
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Op, 1}, {core::Checkpointing::Full, 1}};
    space.ac_first_n = true;
    space.offloads = {core::Offload::None};
    auto all = enumerateSpace(base, space, 16);
    ASSERT_TRUE(all);
    // FULL_SHARD and SHARD_GRAD_OP x 2 prefetch depths = 4 shardings; micro-batch 1, 2 x (3 + 9) modes.
    EXPECT_EQ(all->size(), 4u * 2u * 12u);
    std::set<std::string> acs;
    for (const OptimizeChoice& c : *all) acs.insert(choiceValue(c, OptimizeDimension::Ac));
    EXPECT_EQ(acs.size(), 12u);
    EXPECT_EQ(acs.count("blocks:full*3,none*1"), 1u);
    EXPECT_EQ(acs.count("blocks:full*1,op*3"), 1u);
    EXPECT_EQ(acs.count("blocks:op*2,none*2"), 1u);
    expectSameAnswer(base, space, 16, 3);
}

// Where whole-model none does not fit and full does, the fastest fitting plan checkpoints only the
// first N blocks. On this 4-block model, one sequence per GPU, FULL_SHARD FSDP2 per block, the
// evaluation (`shardcast plan --model llama-3.1-8b --scale layers=4 --seq-len 32768 --ac ...`)
// gives: none 78.19 GiB allocated, over the 75.67 GiB budget; full 27,738 tokens/s per GPU;
// blocks:full*3,none*1 72.91 GiB reserved (fits), 29,041 tokens/s; full*2,none*2 78.54 GiB reserved
// (does not fit). With none and full in the space, --ac-per-block adds only the (full, none) pairs.
TEST(OptimizeTest, AFirstNPlanIsTheAnswerWhereNoneDoesNotFit) {
    const core::Plan base = fourBlockPlan();
    OptimizeSpace space;
    space.strategies = {core::Strategy::FullShard};
    space.fsdp_versions = {2};
    space.wraps = {wrap("block")};
    space.acs = {{core::Checkpointing::None, 1}, {core::Checkpointing::Full, 1}};
    space.offloads = {core::Offload::None};
    space.prefetch = false;
    space.partial_reshard = false;
    space.ac_first_n = true;
    auto all = enumerateSpace(base, space, 8);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 2u + 3u);  // none, full, full*N,none*(4-N) for N = 1..3
    const HardwareProfile profile = HardwareProfile::fromCluster(base.cluster);
    OptimizeOptions options;
    options.global_batch = 8;
    options.top = 3;
    auto r = optimize(base, space, profile, options);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->fits);
    EXPECT_EQ(core::acString(r->best.choice.ac), "blocks:full*3,none*1");
    EXPECT_NEAR(r->best.tokens_per_s_per_gpu, 29041, 1);
    double full_step = 0;
    for (const DimensionLoss& l : r->losses) {
        if (l.dimension != OptimizeDimension::Ac) continue;
        if (l.value == "none") {
            EXPECT_FALSE(l.fits);
        }
        if (l.value == "full") {
            EXPECT_TRUE(l.fits);
            full_step = l.step_s;
        }
    }
    EXPECT_GT(full_step, r->best.step_s);
    for (const std::string& line : r->not_searched) {
        EXPECT_EQ(line.find("one mode for the whole model"), std::string::npos) << line;
    }

    // Every one of the 3^4 assignments of none / op / full to the 4 blocks on the winner's
    // sharding: the best of the searched pairs is the optimizer's; the best of the whole family
    // (all three pairs and the whole-model modes) and the best outside it are printed for the record.
    EvaluationOptions eo;
    eo.per_unit = false;
    using core::Checkpointing;
    const Checkpointing modes[] = {Checkpointing::None, Checkpointing::Op, Checkpointing::Full};
    double searched_best = 0, family_best = 0, outside_best = 0;
    std::string family_label, outside_label;
    for (int code = 0; code < 81; ++code) {
        core::AcSpec ac{Checkpointing::Blocks, 1};
        for (int b = 0, c = code; b < 4; ++b, c /= 3) {
            if (!ac.runs.empty() && ac.runs.back().mode == modes[c % 3]) {
                ac.runs.back().blocks += 1;
            } else {
                ac.runs.push_back({modes[c % 3], 1});
            }
        }
        ASSERT_FALSE(core::resolveAcBlocks(ac, 4, "test").has_value());
        const bool two = ac.mode == Checkpointing::Blocks && ac.runs.size() == 2;
        const bool searched = two && ac.runs[0].mode == Checkpointing::Full && ac.runs[1].mode == Checkpointing::None;
        const bool family = ac.mode != Checkpointing::Blocks ||
                            (two && ((ac.runs[0].mode == Checkpointing::Full && ac.runs[1].mode != Checkpointing::Full) ||
                                     (ac.runs[0].mode == Checkpointing::Op && ac.runs[1].mode == Checkpointing::None)));
        OptimizeChoice c = r->best.choice;
        c.ac = ac;
        auto e = evaluatePlan(applyChoice(base, c), &profile, eo);
        ASSERT_TRUE(e) << e.error().message;
        if (!e->fit.fits) continue;
        const double step = static_cast<double>(e->timeline.step_ns) * 1e-9;
        if (searched && (searched_best == 0 || step < searched_best)) searched_best = step;
        double& best = family ? family_best : outside_best;
        if (best == 0 || step < best) {
            best = step;
            (family ? family_label : outside_label) = core::acString(ac);
        }
    }
    EXPECT_DOUBLE_EQ(searched_best, r->best.step_s);
    std::printf("4 blocks: best of the family %.6f s (%s); best outside it %.6f s (%s): %s\n", family_best,
                family_label.c_str(), outside_best, outside_label.c_str(),
                outside_best > 0 && outside_best < family_best ? "faster" : "not faster");
}

}  // namespace
}  // namespace shardcast::sim
