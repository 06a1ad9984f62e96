// Speed targets of the planner (issue 2): lowering + memory replay of one plan.
//   Llama-3.1-8B per block on 8 GPUs: >= 20,000 plans/s on one core.
//   Llama-3.1-405B per block on 16,384 GPUs: <= 1 ms per plan.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>

#include "core/lower.hpp"
#include "core/memory.hpp"
#include "core/model_io.hpp"
#include "core/plan.hpp"

using namespace shardcast::core;

namespace {

Plan benchPlan(const char* model_name, int nodes) {
    auto model = resolveModel(model_name);
    if (!model) {
        std::fprintf(stderr, "%s\n", model.error().message.c_str());
        std::exit(2);
    }
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = 8192;
    plan.sharding.strategy = Strategy::FullShard;
    plan.sharding.wrap.kind = WrapKind::Block;
    return plan;
}

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
