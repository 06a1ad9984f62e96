// Speed targets of the simulator (issue 3):
//   one plan evaluation (validate + lower + simulate + timed memory curve + summary + fit):
//     Llama-3.1-8B per block on 8 GPUs: >= 20,000 plans/s on one core;
//     Llama-3.1-405B per block on 16,384 GPUs: <= 2 ms;
//   the wrap search for Llama-3.1-405B: <= 2 s;  a sweep of 1,000 plans: <= 1 s on two cores.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "bench/bench_plan.hpp"
#include "core/lower/lower.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "search/sweep.hpp"
#include "search/wrap_search.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/simulator.hpp"

using namespace shardcast;

namespace {

using shardcast::bench::benchPlan;

// The evaluation the sweeps and the search run per candidate (sim::Evaluator without the issue-order
// replay and the per-unit breakdown).
// `reserved_memory`: with the caching allocator model (the default) or without it, to show its cost.
void evaluatePlans(benchmark::State& state, const core::Plan& plan, bool reserved_memory = true) {
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    sim::EvaluationOptions options;
    options.reserved_memory = reserved_memory;
    options.issue_order_memory = false;
    options.per_unit = false;
    sim::Evaluator evaluator;
    sim::Evaluation e;
    for (auto _ : state) {
        auto st = evaluator.evaluate(plan, &profile, options, e);
        if (!st) {
            state.SkipWithError(st.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(e.summary.step_s);
    }
    state.counters["plans/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["tasks"] = static_cast<double>(e.program.size());
}

void BM_Evaluate_Llama8B_8GPUs(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-8b", 1);
    evaluatePlans(state, plan);
}
BENCHMARK(BM_Evaluate_Llama8B_8GPUs)->Unit(benchmark::kMicrosecond);

void BM_Evaluate_Llama8B_8GPUs_AllocatedOnly(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-8b", 1);
    evaluatePlans(state, plan, false);
}
BENCHMARK(BM_Evaluate_Llama8B_8GPUs_AllocatedOnly)->Unit(benchmark::kMicrosecond);

// The same evaluation cycling over four 8B plans (sequence 8,192 and 4,096, AC none and full), so
// that no stage finds the plan it evaluated last: what a sweep or a search pays per candidate.
void BM_Evaluate_Llama8B_8GPUs_AllocatedOnly_Cycle4(benchmark::State& state) {
    static const std::vector<core::Plan> plans = [] {
        std::vector<core::Plan> out;
        for (int64_t seq : {8192, 4096}) {
            for (core::Checkpointing ac : {core::Checkpointing::None, core::Checkpointing::Full}) {
                core::Plan p = benchPlan("llama-3.1-8b", 1);
                p.training.seq_len = seq;
                p.training.ac = ac;
                out.push_back(p);
            }
        }
        return out;
    }();
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plans[0].cluster);
    sim::EvaluationOptions options;
    options.reserved_memory = false;
    options.issue_order_memory = false;
    options.per_unit = false;
    sim::Evaluator evaluator;
    sim::Evaluation e;
    size_t i = 0;
    for (auto _ : state) {
        auto st = evaluator.evaluate(plans[i], &profile, options, e);
        if (!st) {
            state.SkipWithError(st.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(e.summary.step_s);
        i = (i + 1) % plans.size();
    }
    state.counters["plans/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Evaluate_Llama8B_8GPUs_AllocatedOnly_Cycle4)->Unit(benchmark::kMicrosecond);

void BM_Evaluate_Llama405B_16384GPUs(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-405b", 2048);
    evaluatePlans(state, plan);
}
BENCHMARK(BM_Evaluate_Llama405B_16384GPUs)->Unit(benchmark::kMicrosecond);

// Llama 3's own 3D layout (arXiv 2407.21783, Table 4): 405B on 16,384 H100s, tp 8 x pp 16 x dp 128,
// 16 sequences of 8,192 per data-parallel rank as 16 micro-batches of one, 1F1B (Meta's schedule is
// an interleaved one). Each evaluation lowers and times 16 stage Programs, coupled (PipelineTimer).
void BM_Evaluate_Llama405B_16384GPUs_Tp8_Pp16(benchmark::State& state) {
    static const core::Plan plan = [] {
        core::Plan p = benchPlan("llama-3.1-405b", 2048);
        p.sharding.tp = 8;
        p.sharding.pp = 16;
        p.training.grad_accum = 16;
        p.training.ac = core::Checkpointing::Full;
        return p;
    }();
    evaluatePlans(state, plan);
}
BENCHMARK(BM_Evaluate_Llama405B_16384GPUs_Tp8_Pp16)->Unit(benchmark::kMillisecond);

// The same with Meta's kind of schedule: Interleaved1F1B, 2 stages per rank (126 blocks over 32
// stages); each evaluation lowers 16 rank Programs of 2 stages each and times them coupled.
void BM_Evaluate_Llama405B_16384GPUs_Tp8_Pp16_Interleaved2(benchmark::State& state) {
    static const core::Plan plan = [] {
        core::Plan p = benchPlan("llama-3.1-405b", 2048);
        p.sharding.tp = 8;
        p.sharding.pp = 16;
        p.sharding.pp_schedule = core::PpSchedule::Interleaved1F1B;
        p.sharding.pp_virtual_stages = 2;
        p.training.grad_accum = 16;
        p.training.ac = core::Checkpointing::Full;
        return p;
    }();
    evaluatePlans(state, plan);
}
BENCHMARK(BM_Evaluate_Llama405B_16384GPUs_Tp8_Pp16_Interleaved2)->Unit(benchmark::kMillisecond);

void BM_Evaluate_Llama405B_16384GPUs_AllocatedOnly(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-405b", 2048);
    evaluatePlans(state, plan, false);
}
BENCHMARK(BM_Evaluate_Llama405B_16384GPUs_AllocatedOnly)->Unit(benchmark::kMicrosecond);

// Issue 24's bound: `simulate --model llama-3.1-405b --nodes 16 --grad-accum 4096` in <= 1 s. The
// step by its period (sim::kPeriodOver, as simulate and plan evaluate), and every micro-batch of a
// 256-micro-batch step for scale (the whole 4,096 take about 45 s on a 2-core machine).
void evaluateLongAccumulation(benchmark::State& state, int32_t period_over) {
    static const core::Plan plan = [] {
        core::Plan p = benchPlan("llama-3.1-405b", 16);
        p.training.grad_accum = 4096;
        return p;
    }();
    core::Plan whole = plan;
    if (period_over == 0) whole.training.grad_accum = 256;
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    options.period_over = period_over;
    sim::Evaluator evaluator;
    sim::Evaluation e;
    for (auto _ : state) {
        if (auto st = evaluator.evaluate(whole, nullptr, options, e); !st) {
            state.SkipWithError(st.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(e.summary.step_s);
    }
    state.counters["micro_batches"] = static_cast<double>(whole.training.grad_accum);
    state.counters["simulated"] = static_cast<double>(e.program.micro_batches);
}
void BM_Evaluate_Llama405B_128GPUs_Accum4096_ByPeriod(benchmark::State& state) {
    evaluateLongAccumulation(state, sim::kPeriodOver);
}
BENCHMARK(BM_Evaluate_Llama405B_128GPUs_Accum4096_ByPeriod)->Unit(benchmark::kMillisecond);
void BM_Evaluate_Llama405B_128GPUs_Accum256_Whole(benchmark::State& state) { evaluateLongAccumulation(state, 0); }
BENCHMARK(BM_Evaluate_Llama405B_128GPUs_Accum256_Whole)->Unit(benchmark::kMillisecond);

// The evaluation's main stages on their own, each repeated on the output of the one before, to
// show where BM_Evaluate_Llama8B_8GPUs_AllocatedOnly's time goes.
void BM_Stage_Lower_Llama8B_8GPUs(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-8b", 1);
    const core::Mesh mesh = *core::validatePlan(plan);
    core::Lowerer lowerer;
    core::Program program;
    for (auto _ : state) {
        if (auto s = lowerer.lower(plan, mesh, program); !s) {
            state.SkipWithError(s.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(program.tasks.data());
    }
    state.counters["tasks"] = static_cast<double>(program.size());
    state.counters["ops"] = static_cast<double>(program.ops.size());
    state.counters["events"] = static_cast<double>(program.mem.size());
}
BENCHMARK(BM_Stage_Lower_Llama8B_8GPUs)->Unit(benchmark::kMicrosecond);

// The 8B bench plan lowered, and a simulator on its cluster's profile.
struct Lowered8B {
    core::Plan plan = benchPlan("llama-3.1-8b", 1);
    core::Program program;
    sim::Simulator simulator{sim::HardwareProfile::fromCluster(plan.cluster)};
    Lowered8B() { (void)core::lower(plan, *core::validatePlan(plan), program); }
};

void BM_Stage_Simulate_Llama8B_8GPUs(benchmark::State& state) {
    Lowered8B l;
    sim::Simulator& simulator = l.simulator;
    const core::Program& program = l.program;
    core::Timeline timeline;
    for (auto _ : state) {
        simulator.run(program, timeline);
        benchmark::DoNotOptimize(timeline.step_ns);
    }
    state.counters["skipped_periods"] = static_cast<double>(simulator.lastSkippedPeriods());
}
BENCHMARK(BM_Stage_Simulate_Llama8B_8GPUs)->Unit(benchmark::kMicrosecond);

void BM_Stage_TimeMemory_Llama8B_8GPUs(benchmark::State& state) {
    Lowered8B l;
    const core::Program& program = l.program;
    core::Timeline timeline;
    l.simulator.run(program, timeline);
    core::MemoryTimer timer;
    core::TimedMemory timed;
    for (auto _ : state) {
        timer.compute(program, timeline, timed);
        benchmark::DoNotOptimize(timed.peak_bytes);
    }
}
BENCHMARK(BM_Stage_TimeMemory_Llama8B_8GPUs)->Unit(benchmark::kMicrosecond);

// The allocator replay alone (both steps) on the plan's evaluated program: the fast replay (what
// the evaluation runs) or every call (AllocatorReplay::Full). "calls": model calls per replay.
// `grad_accum`: micro-batches per step; `seq`: tokens per sequence (0: the bench plan's).
void BM_ReplayAllocator(benchmark::State& state, const char* model_name, int nodes, core::AllocatorReplay mode,
                        int64_t grad_accum = 1, int64_t seq = 0) {
    core::Plan plan = benchPlan(model_name, nodes);
    plan.training.grad_accum = grad_accum;
    if (seq > 0) plan.training.seq_len = seq;
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    sim::Evaluator evaluator;
    sim::Evaluation e;
    if (auto st = evaluator.evaluate(plan, &profile, sim::EvaluationOptions{}, e); !st) {
        state.SkipWithError(st.error().message.c_str());
        return;
    }
    core::MemoryTimer timer;
    core::TimedMemory timed;
    timer.compute(e.program, e.timeline, timed);
    core::CachingAllocatorModel model;
    core::ReservedMemory out;
    for (auto _ : state) {
        timer.replayAllocator(e.program, e.timeline, e.reserved.config, model, out, mode);
        benchmark::DoNotOptimize(out.stats.peak_reserved_bytes);
    }
    const bool fast = mode == core::AllocatorReplay::Fast || (mode == core::AllocatorReplay::Auto && plan.training.grad_accum == 1);
    const bool second = timer.stepReplay().secondStepSkipped();
    state.counters["calls"] = static_cast<double>(fast ? timer.allocatorReplay().lastCalls()
                                                       : timer.fullReplayCalls() / (second ? 2 : 1));
    state.counters["skipped_periods"] = static_cast<double>(fast ? timer.allocatorReplay().lastSkippedPeriods() : 0);
    state.counters["second_step_skipped"] = second ? 1 : 0;
}

BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs, "llama-3.1-8b", 1, core::AllocatorReplay::Fast)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Full, "llama-3.1-8b", 1, core::AllocatorReplay::Full)->Unit(benchmark::kMicrosecond);
// Four micro-batches: near the device limit (the bench plan's 8,192 tokens) and far from it (2,048).
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4, "llama-3.1-8b", 1, core::AllocatorReplay::Fast, 4)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4_Full, "llama-3.1-8b", 1, core::AllocatorReplay::Full, 4)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4_Seq2048, "llama-3.1-8b", 1, core::AllocatorReplay::Fast, 4, 2048)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4_Seq2048_Full, "llama-3.1-8b", 1, core::AllocatorReplay::Full, 4, 2048)
    ->Unit(benchmark::kMicrosecond);
// At 4,096 tokens the step stays clear of the device limit and the second step is proven to
// repeat the first (TwoStepReplay): Auto replays one step, by PeriodicReplay or, with four
// micro-batches, call by call.
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Seq4096, "llama-3.1-8b", 1, core::AllocatorReplay::Auto, 1, 4096)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Seq4096_Full, "llama-3.1-8b", 1, core::AllocatorReplay::Full, 1, 4096)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4_Seq4096, "llama-3.1-8b", 1, core::AllocatorReplay::Auto, 4, 4096)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama8B_8GPUs_Accum4_Seq4096_Full, "llama-3.1-8b", 1, core::AllocatorReplay::Full, 4, 4096)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama405B_16384GPUs, "llama-3.1-405b", 2048, core::AllocatorReplay::Fast)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayAllocator, Llama405B_16384GPUs_Full, "llama-3.1-405b", 2048, core::AllocatorReplay::Full)
    ->Unit(benchmark::kMicrosecond);

void wrapSearch(benchmark::State& state, const core::Plan& plan) {
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    for (auto _ : state) {
        auto r = sim::searchWrap(plan, profile, sim::WrapSearchOptions{});
        if (!r) {
            state.SkipWithError(r.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(r->full.step_s);
        state.counters["units"] = r->units;
        state.counters["fits"] = r->fits;
    }
}

void BM_WrapSearch_Llama405B_16384GPUs(benchmark::State& state) {
    static const core::Plan plan = [] {
        core::Plan p = benchPlan("llama-3.1-405b", 2048);
        p.training.ac = core::Checkpointing::Full;
        return p;
    }();
    wrapSearch(state, plan);
}
BENCHMARK(BM_WrapSearch_Llama405B_16384GPUs)->Unit(benchmark::kMillisecond);

// At 8,192 tokens per sequence not even one block per unit fits, so the search stops after one
// DP; at 4,096 it runs the DP, the full evaluation and a tightening round.
void BM_WrapSearch_Llama405B_16384GPUs_Seq4096(benchmark::State& state) {
    static const core::Plan plan = [] {
        core::Plan p = benchPlan("llama-3.1-405b", 2048);
        p.training.ac = core::Checkpointing::Full;
        p.training.seq_len = 4096;
        return p;
    }();
    wrapSearch(state, plan);
}
BENCHMARK(BM_WrapSearch_Llama405B_16384GPUs_Seq4096)->Unit(benchmark::kMillisecond);

// 1,000 plans of Llama-3.1-8B on 8 GPUs (strategies x wrap policies x micro-batches x AC) on two threads.
void BM_Sweep1000_Llama8B_TwoThreads(benchmark::State& state) {
    static const core::Plan plan = benchPlan("llama-3.1-8b", 1);
    const sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    sim::SweepOptions options;
    options.threads = 2;
    options.acs = {core::AcSpec{core::Checkpointing::None, 1}, core::AcSpec{core::Checkpointing::Full, 1},
                   core::AcSpec{core::Checkpointing::Op, 1}};
    for (int64_t mb = 1; mb <= 8; ++mb) options.micro_batches.push_back(mb);
    auto candidates = sim::sweepCandidates(plan, options);  // 3 strategies x 15 wraps x 8 x 3 = 1,080
    candidates.resize(std::min<size_t>(candidates.size(), 1000));
    for (auto _ : state) {
        auto results = sim::runSweep(plan, candidates, profile, options);
        benchmark::DoNotOptimize(results.data());
    }
    state.counters["plans"] = static_cast<double>(candidates.size());
}
BENCHMARK(BM_Sweep1000_Llama8B_TwoThreads)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
