// Speed targets of the planner (issue 2): lowering + memory replay of one plan.
//   Llama-3.1-8B per block on 8 GPUs: >= 20,000 plans/s on one core.
//   Llama-3.1-405B per block on 16,384 GPUs: <= 1 ms per plan.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>

#include "bench/bench_plan.hpp"
#include "core/lower/lower.hpp"
#include "core/memory/memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"

using namespace shardcast::core;

namespace {

using shardcast::bench::benchPlan;

void runPlans(benchmark::State& state, const Plan& plan) {
    auto mesh = validatePlan(plan);
    if (!mesh) {
        state.SkipWithError(mesh.error().message.c_str());
        return;
    }
    Lowerer lowerer;
    Program program;
    MemoryReport report;
    for (auto _ : state) {
        auto st = lowerer.lower(plan, *mesh, program);
        benchmark::DoNotOptimize(st);
        replayMemory(program, report);
        benchmark::DoNotOptimize(report.peak_bytes);
    }
    state.counters["plans/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["tasks"] = static_cast<double>(program.size());
}

void BM_LowerAndReplay_Llama8B_8GPUs(benchmark::State& state) {
    static const Plan plan = benchPlan("llama-3.1-8b", 1);
    runPlans(state, plan);
}
BENCHMARK(BM_LowerAndReplay_Llama8B_8GPUs)->Unit(benchmark::kMicrosecond);

void BM_LowerAndReplay_Llama405B_16384GPUs(benchmark::State& state) {
    static const Plan plan = benchPlan("llama-3.1-405b", 2048);
    runPlans(state, plan);
}
BENCHMARK(BM_LowerAndReplay_Llama405B_16384GPUs)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
