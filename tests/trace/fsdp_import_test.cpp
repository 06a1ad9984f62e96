// Real CPU FSDP traces (tests/data/traces, made by scripts/torch_fsdp_trace.py; README.md there has
// each command) mapped onto their plans' Programs. Expected values are read from the trace's own
// events here, independently of the importer's matching.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/plan/plan.hpp"
#include "measured/diagnosis.hpp"
#include "measured/run_calibration.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"
#include "trace/fsdp_import.hpp"

namespace shardcast::trace {
namespace {

const std::string kTraces = std::string(SHARDCAST_SOURCE_DIR) + "/tests/data/traces/";

struct Loaded {
    sim::Evaluation e;
    std::vector<RankTrace> ranks;
};

Loaded load(const std::string& fixture, int ranks, const std::string& plan_fixture = "") {
    Loaded out;
    auto plan = core::loadPlanFile(kTraces + (plan_fixture.empty() ? fixture : plan_fixture) + "/plan.json");
    EXPECT_TRUE(plan) << plan.error().message;
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan->cluster);
    sim::Evaluator evaluator;
    EXPECT_TRUE(evaluator.evaluate(*plan, &profile, sim::EvaluationOptions{}, out.e));
    for (int r = 0; r < ranks; ++r) {
        auto t = readKinetoTrace(kTraces + fixture + "/rank" + std::to_string(r) + ".json.gz");
        EXPECT_TRUE(t) << t.error().message;
        out.ranks.push_back(std::move(*t));
    }
    return out;
}

const Event& only(const RankTrace& t, std::string_view name) {
    const Event* found = nullptr;
    int n = 0;
    for (const Event& e : t.events) {
        if (t.name(e) == name) {
            found = &e;
            ++n;
        }
    }
    EXPECT_EQ(n, 1) << name;
    return *found;
}

int32_t taskOf(const core::Program& p, const std::string& unit, core::TaskKind kind, int nth = 0) {
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.unit >= 0 && p.units[static_cast<size_t>(t.unit)].name == unit && t.kind == kind && nth-- == 0) return id;
    }
    return -1;
}

TEST(FsdpImportTest, Fsdp2BlockUnitsMapEveryLabelAndTimeEveryTask) {
    Loaded l = load("llama-block-2r", 2);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp) << imp.error().message;
    EXPECT_EQ(imp->flavour, "FSDP2");
    EXPECT_EQ(imp->collectives, "gloo");
    EXPECT_EQ(imp->step_number, 1);
    EXPECT_EQ(imp->fsdp_labels, 53);
    EXPECT_EQ(imp->fsdp_mapped, 53);
    EXPECT_TRUE(imp->unmapped.empty());
    EXPECT_EQ(imp->measured_tasks, l.e.program.size());
    EXPECT_TRUE(imp->run.unmeasured_tasks.empty());
    ASSERT_EQ(imp->ranks.size(), 2u);
    EXPECT_EQ(imp->run.memory_kind, core::RunRecord::MemoryKind::Rise);

    const RankTrace& t = l.ranks[0];
    const Event& step = only(t, "ProfilerStep#1");
    EXPECT_EQ(imp->run.timeline.step_ns, step.dur_ns);
    // A block's forward: from its pre-forward hook's end to its post-forward hook's start.
    const Event& pre = only(t, "FSDP::pre_forward (model.layers.1)");
    const Event& post = only(t, "FSDP::post_forward (model.layers.1)");
    const int32_t fwd = taskOf(l.e.program, "model.layers.1", core::TaskKind::Forward);
    ASSERT_GE(fwd, 0);
    const core::TaskTime& tt = imp->run.timeline.tasks[static_cast<size_t>(fwd)];
    EXPECT_EQ(tt.start_ns, pre.endNs() - step.ts_ns);
    EXPECT_EQ(tt.end_ns, post.ts_ns - step.ts_ns);
    // The root's forward is two pieces: before layers.0's pre-forward (embedding) and after
    // layers.3's post-forward (norm, head, loss).
    const int32_t root_head = taskOf(l.e.program, "(root)", core::TaskKind::Forward, 1);
    const Event& last_post = only(t, "FSDP::post_forward (model.layers.3)");
    const Event& root_post = only(t, "FSDP::post_forward");
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(root_head)].start_ns, last_post.endNs() - step.ts_ns);
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(root_head)].end_ns, root_post.ts_ns - step.ts_ns);
    // Every measured task lies inside the step; compute tasks do not overlap one another.
    std::vector<std::pair<int64_t, int64_t>> compute;
    for (int32_t id = 0; id < l.e.program.size(); ++id) {
        const core::TaskTime& x = imp->run.timeline.tasks[static_cast<size_t>(id)];
        EXPECT_GE(x.start_ns, 0);
        EXPECT_LE(x.start_ns, x.end_ns);
        const core::TaskKind k = l.e.program.tasks[static_cast<size_t>(id)].kind;
        if (k == core::TaskKind::Forward || k == core::TaskKind::Backward) compute.push_back({x.start_ns, x.end_ns});
    }
    std::sort(compute.begin(), compute.end());
    for (size_t i = 1; i < compute.size(); ++i) EXPECT_LE(compute[i - 1].second, compute[i].first);
}

TEST(FsdpImportTest, GlooCollectivesAreTheirRunloopSpans) {
    Loaded l = load("llama-block-2r", 2);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp);
    const RankTrace& t = l.ranks[0];
    const Event& step = only(t, "ProfilerStep#1");
    std::vector<const Event*> gloo;
    for (const Event& e : t.events) {
        if (t.name(e).starts_with("gloo:") && e.ts_ns >= step.ts_ns && e.ts_ns < step.endNs()) gloo.push_back(&e);
    }
    std::sort(gloo.begin(), gloo.end(), [](const Event* a, const Event* b) { return a->ts_ns < b->ts_ns; });
    ASSERT_EQ(gloo.size(), 14u);
    // The step's first collective is the root's all-gather (the root unit is gathered first).
    const int32_t ag = taskOf(l.e.program, "(root)", core::TaskKind::AllGather);
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(ag)].start_ns, gloo[0]->ts_ns - step.ts_ns);
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(ag)].durationNs(), gloo[0]->dur_ns);
    // The last is the root's reduce-scatter (gloo runs it as an all-reduce).
    const int32_t rs = taskOf(l.e.program, "(root)", core::TaskKind::ReduceScatter);
    EXPECT_EQ(t.name(*gloo.back()), "gloo:all_reduce");
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(rs)].durationNs(), gloo.back()->dur_ns);
}

TEST(FsdpImportTest, OtherFixturesMapEveryFsdpLabel) {
    struct Case {
        const char* fixture;
        int ranks;
        const char* flavour;
        std::vector<std::string> unmeasured;  // the task kinds the trace cannot time, exactly
    };
    // Whole-model units: the per-block segments of one hook window; AC: the recompute inside backward;
    // FSDP1: no copy-in op (its all-gathers, prefetched in backward for the next unit, are all timed).
    for (const Case& c : {Case{"llama-whole-2r", 2, "FSDP2", {"BWD", "FWD"}},
                          Case{"llama-block-noreshard-acfull-4r", 4, "FSDP2", {"RECOMP"}}, Case{"gpt2-block-2r", 2, "FSDP2", {}},
                          Case{"llama-block-2r-absolute", 2, "FSDP2", {}}, Case{"llama-fsdp1-block-2r", 2, "FSDP1", {"COPYIN"}},
                          // PEFT's LoRA model is the FSDP root: its labels name "base_model.model." + the units.
                          Case{"llama-lora-block-2r", 2, "FSDP2", {}}}) {
        SCOPED_TRACE(c.fixture);
        Loaded l = load(c.fixture, c.ranks);
        auto imp = importTraces(l.ranks, l.e.program);
        ASSERT_TRUE(imp) << imp.error().message;
        EXPECT_EQ(imp->flavour, c.flavour);
        EXPECT_GT(imp->fsdp_labels, 0);
        EXPECT_EQ(imp->fsdp_mapped, imp->fsdp_labels);
        EXPECT_TRUE(imp->unmapped.empty());
        EXPECT_EQ(static_cast<int>(imp->ranks.size()), c.ranks);
        std::vector<std::string> kinds;
        for (const LabelCount& k : imp->unmeasured_by_kind) kinds.push_back(k.label);
        EXPECT_EQ(kinds, c.unmeasured);
    }
}

TEST(FsdpImportTest, TraceOpsAreClassedByName) {
    EXPECT_EQ(opKindOfTraceOp("aten::linear"), TraceOpKind::Gemm);
    EXPECT_EQ(opKindOfTraceOp("aten::addmm"), TraceOpKind::Gemm);
    EXPECT_EQ(opKindOfTraceOp("aten::bmm"), TraceOpKind::Gemm);
    EXPECT_EQ(opKindOfTraceOp("autograd::engine::evaluate_function: MmBackward0"), TraceOpKind::Gemm);
    EXPECT_EQ(opKindOfTraceOp("autograd::engine::evaluate_function: AddmmBackward0"), TraceOpKind::Gemm);
    EXPECT_EQ(opKindOfTraceOp("aten::scaled_dot_product_attention"), TraceOpKind::Attention);
    EXPECT_EQ(opKindOfTraceOp("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0"),
              TraceOpKind::Attention);
    EXPECT_EQ(opKindOfTraceOp("aten::_efficient_attention_forward"), TraceOpKind::Attention);
    EXPECT_EQ(opKindOfTraceOp("c10d::allgather_"), TraceOpKind::Communication);
    EXPECT_EQ(opKindOfTraceOp("record_param_comms"), TraceOpKind::Communication);
    EXPECT_EQ(opKindOfTraceOp("fsdp::all_gather_copy_in"), TraceOpKind::Communication);
    EXPECT_EQ(opKindOfTraceOp("aten::mul"), TraceOpKind::Other);
    EXPECT_EQ(opKindOfTraceOp("aten::mmx"), TraceOpKind::Other);  // whole names only
    EXPECT_EQ(opKindOfTraceOp("autograd::engine::evaluate_function: MulBackward0"), TraceOpKind::Other);
}

// A compute task's ops are the outermost CPU ops on the main thread inside its span: a block's
// forward has its seven projections (aten::linear) and its attention, with their exact times; its
// backward, the autograd nodes of its matmuls and of the attention.
TEST(FsdpImportTest, ComputeTasksBreakDownIntoTheirOps) {
    Loaded l = load("llama-block-2r", 2);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp) << imp.error().message;
    ASSERT_EQ(imp->task_ops.size(), l.e.program.tasks.size());
    const RankTrace& t = l.ranks[0];
    const Event& step = only(t, "ProfilerStep#1");
    const int64_t main_tid = only(t, "FSDP::pre_forward (model.layers.1)").tid;
    const auto sumIn = [&](int32_t id, std::string_view name, int& n) {
        const core::TaskTime& tt = imp->run.timeline.tasks[static_cast<size_t>(id)];
        int64_t ns = 0;
        n = 0;
        for (const Event& e : t.events) {
            if (e.tid == main_tid && t.name(e) == name && e.ts_ns >= step.ts_ns + tt.start_ns && e.endNs() <= step.ts_ns + tt.end_ns) {
                ns += e.dur_ns;
                ++n;
            }
        }
        return ns;
    };
    int n = 0;
    const int32_t fwd = taskOf(l.e.program, "model.layers.1", core::TaskKind::Forward);
    const core::MeasuredOps& f = imp->task_ops[static_cast<size_t>(fwd)];
    EXPECT_TRUE(f.measured);
    EXPECT_EQ(f.gemm_ns, sumIn(fwd, "aten::linear", n));
    EXPECT_EQ(n, 7);  // q, k, v, o, gate, up, down
    EXPECT_EQ(f.attention_ns, sumIn(fwd, "aten::scaled_dot_product_attention", n));
    EXPECT_EQ(n, 1);
    EXPECT_GT(f.other_ns, 0);
    EXPECT_GT(f.count, 8);
    EXPECT_LE(f.gemm_ns + f.attention_ns + f.other_ns, imp->run.timeline.tasks[static_cast<size_t>(fwd)].durationNs());
    const int32_t bwd = taskOf(l.e.program, "model.layers.1", core::TaskKind::Backward);
    const core::MeasuredOps& b = imp->task_ops[static_cast<size_t>(bwd)];
    EXPECT_EQ(b.gemm_ns, sumIn(bwd, "autograd::engine::evaluate_function: MmBackward0", n));
    EXPECT_EQ(n, 7);
    EXPECT_EQ(b.attention_ns, sumIn(bwd, "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0", n));
    EXPECT_EQ(n, 1);
    // Collectives and copies are not compute: no breakdown.
    for (size_t id = 0; id < l.e.program.tasks.size(); ++id) {
        const core::TaskKind k = l.e.program.tasks[id].kind;
        if (k != core::TaskKind::Forward && k != core::TaskKind::Backward && k != core::TaskKind::Recompute) {
            EXPECT_FALSE(imp->task_ops[id].measured) << id;
        }
    }
}

// A real GPU run (tests/data/traces/llama8b-4layers-h200: Llama-3.1-8B's width, 4 layers, seq 8192,
// bf16 FSDP2 on one H200, README.md there). Its backward and its FSDP hooks run on autograd's device
// thread, not the training loop's; the host only queues work, so each task is timed by the GPU work
// launched from its span. The expected figures were read off the trace by a separate script (each
// launch's correlation to its kernel, copy or memset, from the first one's start to the last one's
// end; layer 1's forward per outermost launching op), not by the importer.
TEST(FsdpImportTest, GpuRunIsTimedByTheGpuWorkEachTaskLaunched) {
    Loaded l = load("llama8b-4layers-h200", 1);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp) << imp.error().message;
    const RankTrace& t = l.ranks[0];
    EXPECT_EQ(imp->flavour, "FSDP2");
    EXPECT_TRUE(imp->device_time);
    // The step of median duration among ProfilerStep#1..4 (CPU spans of 205.7 .. 210.8 ms).
    EXPECT_EQ(imp->step_number, 4);
    EXPECT_EQ(imp->run.timeline.step_ns, 209'108'000);
    int64_t threads_with_hooks = 0;
    {
        std::set<int64_t> tids;
        for (const Event& e : t.events) {
            if (e.category == Category::UserAnnotation && t.name(e).starts_with("FSDP::")) tids.insert(e.tid);
        }
        threads_with_hooks = static_cast<int64_t>(tids.size());
    }
    EXPECT_EQ(threads_with_hooks, 2);  // the loop's thread (forward) and autograd's (backward)
    const auto span = [&](const std::string& unit, core::TaskKind kind) {
        return imp->run.timeline.tasks[static_cast<size_t>(taskOf(l.e.program, unit, kind))].durationNs();
    };
    const std::array<int64_t, 4> fwd = {7'367'223, 7'371'768, 7'361'048, 7'364'600};
    const std::array<int64_t, 4> bwd = {16'501'407, 16'915'771, 17'241'656, 17'121'785};
    for (int layer = 0; layer < 4; ++layer) {
        const std::string unit = "model.layers." + std::to_string(layer);
        EXPECT_EQ(span(unit, core::TaskKind::Forward), fwd[static_cast<size_t>(layer)]) << unit;
        EXPECT_EQ(span(unit, core::TaskKind::Backward), bwd[static_cast<size_t>(layer)]) << unit;
    }
    int32_t opt = -1;
    for (int32_t id = 0; id < l.e.program.size(); ++id) {
        if (l.e.program.tasks[static_cast<size_t>(id)].kind == core::TaskKind::OptimizerStep) opt = id;
    }
    ASSERT_GE(opt, 0);
    EXPECT_EQ(imp->run.timeline.tasks[static_cast<size_t>(opt)].durationNs(), 42'500'001);  // foreach AdamW's kernels

    // Layer 1's forward by the op that launched each piece of GPU work: the 7 projections' GEMMs,
    // cuDNN's flash attention, and the rest (norms, RoPE, SiLU, casts, residual adds).
    const core::MeasuredOps& f = imp->task_ops[static_cast<size_t>(taskOf(l.e.program, "model.layers.1", core::TaskKind::Forward))];
    EXPECT_TRUE(f.measured);
    EXPECT_EQ(f.gemm_ns, 4'571'986);
    EXPECT_EQ(f.attention_ns, 902'199);
    EXPECT_EQ(f.other_ns, 1'826'417);
    EXPECT_EQ(f.count, 52);
    EXPECT_LE(f.gemm_ns + f.attention_ns + f.other_ns, fwd[1]);

    // GPU memory: the largest CUDA Total Allocated among the step's [memory] events.
    const Event* step = nullptr;
    for (const Event& e : t.events) {
        if (e.category == Category::UserAnnotation && t.name(e) == "ProfilerStep#4") step = &e;
    }
    ASSERT_NE(step, nullptr);
    int64_t peak = 0;
    for (const MemoryEvent& m : t.memory) {
        if (m.device_type == 1 && m.ts_ns >= step->ts_ns && m.ts_ns < step->endNs()) peak = std::max(peak, m.total_allocated);
    }
    EXPECT_EQ(imp->run.memory_kind, core::RunRecord::MemoryKind::Total);
    EXPECT_EQ(imp->run.memory.peak_bytes, peak);
    EXPECT_GT(peak, int64_t{40} << 30);
}

// CPU memory is the step's peak Total Allocated less the level the step started from (the last
// [memory] event before it), by the events' own totals.
TEST(FsdpImportTest, CpuMemoryIsThePeakRiseAboveTheStepsStart) {
    Loaded l = load("llama-block-2r-absolute", 2);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp);
    EXPECT_EQ(imp->run.memory_kind, core::RunRecord::MemoryKind::Rise);
    const RankTrace& t = l.ranks[0];
    // The step without a schedule: from the root's pre-forward to the end of the optimizer step.
    const Event& root = only(t, "FSDP::root_pre_forward");
    const Event& opt = only(t, "Optimizer.step#AdamW.step");
    EXPECT_EQ(imp->run.timeline.step_ns, opt.endNs() - root.ts_ns);
    int64_t peak = 0, start = 0, start_ts = INT64_MIN;
    for (const MemoryEvent& m : t.memory) {
        if (m.ts_ns < root.ts_ns && m.ts_ns >= start_ts) {
            start = m.total_allocated;
            start_ts = m.ts_ns;
        }
        if (m.ts_ns >= root.ts_ns && m.ts_ns < opt.endNs()) peak = std::max(peak, m.total_allocated);
    }
    EXPECT_GT(start, 4 << 20);  // the model's sharded parameters were allocated before the step
    EXPECT_EQ(imp->run.memory.peak_bytes, peak - start);
    // The curve: every [memory] event of the step (fewer than the thinning limit here), from the
    // step's start, as its rise; its highest point is the peak.
    size_t in_step = 0;
    for (const MemoryEvent& m : t.memory) in_step += m.ts_ns >= root.ts_ns && m.ts_ns < opt.endNs() ? 1 : 0;
    const std::vector<core::TotalPoint>& curve = imp->run.memory_total_curve;
    ASSERT_EQ(curve.size(), in_step);
    ASSERT_GT(in_step, 10U);
    EXPECT_GE(curve.front().time_ns, 0);
    EXPECT_LT(curve.back().time_ns, imp->run.timeline.step_ns);
    const auto top = std::max_element(curve.begin(), curve.end(), [](auto a, auto b) { return a.bytes < b.bytes; });
    EXPECT_EQ(top->bytes, peak - start);
    EXPECT_EQ(top->time_ns, imp->run.memory.peak_time_ns);
}

// A whole-model unit exposes its all-gather (it gathers every parameter before any compute): the
// diagnosis names the root and the time the compute stream sat idle while it ran, which on a CPU
// (gloo, nothing overlaps) is the whole gloo:all_gather span.
TEST(FsdpImportTest, WholeModelUnitIsFlaggedWithItsWait) {
    Loaded l = load("llama-whole-2r", 2);
    auto imp = importTraces(l.ranks, l.e.program);
    ASSERT_TRUE(imp) << imp.error().message;
    std::vector<uint8_t> skip(l.e.program.tasks.size(), 0);
    for (const int32_t id : imp->run.unmeasured_tasks) skip[static_cast<size_t>(id)] = 1;
    auto plan = core::loadPlanFile(kTraces + "llama-whole-2r/plan.json");
    ASSERT_TRUE(plan);
    const sim::Diagnosis d = sim::diagnose(*plan, l.e.profile, l.e.program, l.e.timeline, imp->run.timeline, skip, {});
    const RankTrace& t = l.ranks[0];
    const Event& step = only(t, "ProfilerStep#1");
    int64_t gathered = 0;
    for (const Event& e : t.events) {
        if (t.name(e) == "gloo:all_gather" && e.ts_ns >= step.ts_ns && e.ts_ns < step.endNs()) gathered += e.dur_ns;
    }
    ASSERT_GT(gathered, 0);
    const auto it = std::find_if(d.findings.begin(), d.findings.end(),
                                 [](const sim::Finding& f) { return f.kind == sim::Finding::Kind::LazyUnshard; });
    ASSERT_NE(it, d.findings.end());
    EXPECT_EQ(l.e.program.units[static_cast<size_t>(it->unit)].name, "(root)");
    EXPECT_EQ(it->measured_ns, gathered);
    EXPECT_NE(it->message.find("(root)"), std::string::npos);
}

// The loop on real data (fixed files, so the figures are deterministic): a profile fitted to one real
// CPU run predicts another configuration's real step (reshard_after_forward false instead of true)
// within 15%, and its peak memory rise within 5% (docs/trace-import.md, "Validation").
TEST(FsdpImportTest, ProfileFittedToOneRealRunPredictsAnother) {
    Loaded cal = load("llama-block-2r-5steps", 2);
    auto cal_run = importTraces(cal.ranks, cal.e.program);
    ASSERT_TRUE(cal_run) << cal_run.error().message;
    EXPECT_EQ(cal_run->ranks.size(), 2u);
    EXPECT_NE(cal_run->step_number, 0);  // the first step is not steady: never the one recorded
    auto cal_plan = core::loadPlanFile(kTraces + "llama-block-2r-5steps/plan.json");
    ASSERT_TRUE(cal_plan);
    // As `calibrate --from-trace` does: op by op, from the trace's CPU ops.
    auto fit = sim::calibrateFromRun(*cal_plan, cal.e.profile, cal_run->run.timeline, {}, "test", cal_run->task_ops);
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_NEAR(static_cast<double>(fit->predicted_step_after_ns) / static_cast<double>(cal_run->run.timeline.step_ns), 1.0, 0.01);
    const auto fitted = [&](const std::string& figure) {
        for (const sim::RunFitLine& line : fit->lines) {
            if (line.figure == figure) return line.fitted;
        }
        return false;
    };
    EXPECT_TRUE(fitted("forward_efficiency_max") && fitted("attention_forward_efficiency") && fitted("backward_efficiency_max") &&
                fitted("attention_backward_efficiency") && fitted("kernel_launch_ns"));

    Loaded held = load("llama-noreshard-2r-5steps", 2);
    auto held_run = importTraces(held.ranks, held.e.program);
    ASSERT_TRUE(held_run) << held_run.error().message;
    auto held_plan = core::loadPlanFile(kTraces + "llama-noreshard-2r-5steps/plan.json");
    ASSERT_TRUE(held_plan);
    auto predicted = sim::evaluatePlan(*held_plan, &fit->profile, {});
    ASSERT_TRUE(predicted);
    const double step_error = static_cast<double>(predicted->timeline.step_ns - held_run->run.timeline.step_ns) /
                              static_cast<double>(held_run->run.timeline.step_ns);
    EXPECT_LT(std::fabs(step_error), 0.15) << step_error;
    int64_t steady = 0;
    for (const int64_t b : predicted->program.initial) steady += b;
    const double memory_error = static_cast<double>(predicted->timed.peak_bytes - steady - held_run->run.memory.peak_bytes) /
                                static_cast<double>(held_run->run.memory.peak_bytes);
    EXPECT_LT(std::fabs(memory_error), 0.05) << memory_error;
}

TEST(FsdpImportTest, MismatchedInputsAreErrors) {
    {
        Loaded l = load("llama-block-2r", 2, "llama-block-noreshard-acfull-4r");
        auto imp = importTraces(l.ranks, l.e.program);
        ASSERT_FALSE(imp);
        EXPECT_NE(imp.error().message.find("run of 2 ranks"), std::string::npos) << imp.error().message;
        EXPECT_NE(imp.error().message.find("the plan has 4"), std::string::npos) << imp.error().message;
    }
    Loaded l = load("llama-block-2r", 2);
    {
        std::vector<RankTrace> twice = {l.ranks[0], l.ranks[0]};
        auto imp = importTraces(twice, l.e.program);
        ASSERT_FALSE(imp);
        EXPECT_NE(imp.error().message.find("are both rank 0"), std::string::npos) << imp.error().message;
    }
    {
        Loaded other = load("gpt2-block-2r", 2);
        std::vector<RankTrace> mixed = {l.ranks[0], other.ranks[1]};
        auto imp = importTraces(mixed, l.e.program);
        ASSERT_FALSE(imp);
        EXPECT_NE(imp.error().message.find("different runs"), std::string::npos) << imp.error().message;
    }
    {
        ImportOptions o;
        o.step = 7;
        auto imp = importTraces(l.ranks, l.e.program, o);
        ASSERT_FALSE(imp);
        EXPECT_NE(imp.error().message.find("no step 7 (the trace has steps 1)"), std::string::npos) << imp.error().message;
    }
    {
        auto t = readKinetoTraceBytes(R"({"traceEvents": [{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})",
                                      "plain.json");
        ASSERT_TRUE(t);
        auto imp = importTraces({*t}, l.e.program);
        ASSERT_FALSE(imp);
        EXPECT_NE(imp.error().message.find("not a torch.profiler trace of an FSDP run"), std::string::npos);
    }
}

}  // namespace
}  // namespace shardcast::trace
