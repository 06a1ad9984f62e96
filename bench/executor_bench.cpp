// Executor overhead per task: a lowered Llama-3.1-8B Program (8 x H100, FULL_SHARD, per block) on
// the null backend, whose kernels and collectives return at once, so every microsecond is the
// executor's (issue, stream workers, dependency waits, memory events). Reported as us/task.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "core/lower/lower.hpp"
#include "core/plan/plan_build.hpp"
#include "executor/executor.hpp"
#include "executor/null_backend.hpp"

namespace {

using namespace shardcast;

core::Program llamaProgram() {
    core::PlanOverrides o;
    o.model = "llama-3.1-8b";
    o.nodes = 1;
    o.gpus_per_node = 8;
    o.seq_len = 4096;
    o.wrap = "block";
    core::Program program;
    auto plan = core::buildPlan(o);
    if (!plan) return program;
    auto mesh = core::validatePlan(*plan);
    if (!mesh || !core::lower(*plan, *mesh, program)) program.clear();
    return program;
}

void BM_ExecutorOverheadPerTask(benchmark::State& state) {
    const core::Program program = llamaProgram();
    if (program.size() == 0) {
        state.SkipWithError("lowering llama-3.1-8b failed");
        return;
    }
    exec::NullBackend backend;  // memory counted, not held
    exec::Executor executor(backend);
    const int32_t steps = static_cast<int32_t>(state.range(0));
    int64_t step_ns = 0;
    for (auto _ : state) {
        auto run = executor.run(program, {.warmup = 0, .steps = steps});
        if (!run) {
            state.SkipWithError(run.error().message.c_str());
            return;
        }
        step_ns = run->step_ns[static_cast<size_t>(run->median_step)];
        benchmark::DoNotOptimize(step_ns);
    }
    state.counters["tasks"] = program.size();
    state.counters["us/task"] = static_cast<double>(step_ns) * 1e-3 / program.size();
    state.SetItemsProcessed(state.iterations() * steps * program.size());
}
BENCHMARK(BM_ExecutorOverheadPerTask)->Arg(5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
