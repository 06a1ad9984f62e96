// Speed targets of the store (issue 9), on a real file in a temporary folder:
//   saving a prediction of Llama-3.1-70B on 64 H100s (its timeline and memory curve): <= 20 ms;
//   listing 10,000 stored plans: <= 100 ms;
//   loading a stored prediction (timeline, memory curve, summary) of Llama-3.1-405B on 16,384 GPUs: <= 50 ms.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/bench_plan.hpp"
#include "core/plan/plan.hpp"
#include "core/results/step_io.hpp"
#include "db/store.hpp"
#include "simulator/evaluation.hpp"

using namespace shardcast;

namespace {

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "db_bench: %s\n", message.c_str());
    std::exit(2);
}

class BenchDir {
public:
    BenchDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "shardcast-db-bench-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) fail("mkdtemp " + pattern);
        m_path = pattern;
    }
    ~BenchDir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    const std::filesystem::path& path() const { return m_path; }

private:
    std::filesystem::path m_path;
};

// The store's bytes on disk: the file and its write-ahead log (not yet checkpointed into it).
double storeMegabytes(const std::filesystem::path& path) {
    std::error_code ec;
    const auto wal = std::filesystem::file_size(path.string() + "-wal", ec);
    return static_cast<double>(std::filesystem::file_size(path) + (ec ? 0 : wal)) / 1e6;
}

std::unique_ptr<db::Store> openStore(const std::filesystem::path& path) {
    auto store = db::Store::open(path);
    if (!store) fail(store.error().message);
    return std::move(store).value();
}

// The benchmarks' plan (bench/bench_plan.hpp) evaluated with its memory curve, as
// `shardcast simulate --save` would store it.
db::PredictionInput prediction(const char* model_name, int nodes) {
    const core::Plan plan = bench::benchPlan(model_name, nodes);
    sim::EvaluationOptions options;
    options.record_curve = true;
    auto e = sim::evaluatePlan(plan, nullptr, options);
    if (!e) fail(e.error().message);
    auto self = core::selfContainedPlanJson(plan);
    if (!self) fail(self.error().message);
    db::PredictionInput in;
    in.name = model_name;
    in.plan = std::move(*self);
    in.headroom = options.headroom;
    in.summary = core::stepSummaryToJson(e->summary);
    in.timeline = core::timelineToJson(e->timeline);
    in.memory = core::timedMemoryToJson(e->timed);
    in.summary_line = std::to_string(e->summary.step_s) + " s";
    return in;
}

void BM_SavePrediction_Llama70B_64GPUs(benchmark::State& state) {
    BenchDir dir;
    auto store = openStore(dir.path() / "store.db");
    const db::PredictionInput in = prediction("llama-3.1-70b", 8);
    for (auto _ : state) {
        auto id = store->savePrediction(in);
        if (!id) {
            state.SkipWithError(id.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(id->number);
    }
    state.counters["timeline_tasks"] = static_cast<double>(in.timeline.at("tasks").size());
    state.counters["json_MB"] = static_cast<double>(in.timeline.dump().size() + in.memory.dump().size()) / 1e6;
    state.counters["store_MB"] = storeMegabytes(dir.path() / "store.db");
    state.counters["saves"] = static_cast<double>(state.iterations());
}
BENCHMARK(BM_SavePrediction_Llama70B_64GPUs)->Unit(benchmark::kMillisecond);

void BM_List_10000Plans(benchmark::State& state) {
    BenchDir dir;
    auto store = openStore(dir.path() / "store.db");
    // Distinct plans (a plan of each micro-batch size), as a long-kept store accumulates them.
    const nlohmann::json base = core::planToJson(*core::loadPlanFile(std::filesystem::path(SHARDCAST_SOURCE_DIR) /
                                                                      "examples" / "llama-3.1-8b-8xh100.json"));
    for (int i = 0; i < 10'000; ++i) {
        nlohmann::json plan = base;
        plan["training"]["micro_batch"] = i + 1;
        auto id = store->savePlan(plan, "plan " + std::to_string(i), "llama-3.1-8b, 8x H100-SXM, FULL_SHARD");
        if (!id) fail(id.error().message);
        if (i % 7 == 0 && !store->addTag(*id, "kept")) fail("addTag");
    }
    size_t n = 0;
    for (auto _ : state) {
        auto entries = store->list(db::Kind::plan, std::nullopt);
        if (!entries) {
            state.SkipWithError(entries.error().message.c_str());
            return;
        }
        n = entries->size();
        benchmark::DoNotOptimize(entries->data());
    }
    state.counters["entries"] = static_cast<double>(n);
}
BENCHMARK(BM_List_10000Plans)->Unit(benchmark::kMillisecond);

void BM_LoadPrediction_Llama405B_16384GPUs(benchmark::State& state) {
    BenchDir dir;
    auto store = openStore(dir.path() / "store.db");
    const db::PredictionInput in = prediction("llama-3.1-405b", 2048);
    auto id = store->savePrediction(in);
    if (!id) fail(id.error().message);
    for (auto _ : state) {
        auto object = store->get(*id);
        if (!object) {
            state.SkipWithError(object.error().message.c_str());
            return;
        }
        benchmark::DoNotOptimize(object->body.size());
    }
    auto back = store->get(*id);
    if (back->body.at("timeline") != in.timeline) state.SkipWithError("the timeline read back differs");
    state.counters["timeline_tasks"] = static_cast<double>(in.timeline.at("tasks").size());
    state.counters["json_MB"] = static_cast<double>(in.timeline.dump().size() + in.memory.dump().size()) / 1e6;
    state.counters["store_MB"] = storeMegabytes(dir.path() / "store.db");
}
BENCHMARK(BM_LoadPrediction_Llama405B_16384GPUs)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
