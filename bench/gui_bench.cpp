// Responsiveness targets of the GUI (issue 10), offscreen:
//   after a knob change, re-plan and redraw (fit headline, memory curve, timeline) of
//   Llama-3.1-70B on 64 H100s, wrap per block: <= 50 ms;
//   the whole wrap-granularity view (every sweep candidate, the exact search, the table and the
//   scatter) refreshed: <= 200 ms.
// The knob change alternates the micro-batch between 1 and 2, so no result is reused.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include "core/plan/plan_build.hpp"
#include "gui/state/plan_results.hpp"
#include "gui/views/fit_view.hpp"
#include "gui/views/memory_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui/views/wrap_view.hpp"

using namespace shardcast;

namespace {

core::PlanOverrides llama70b(int64_t micro_batch) {
    core::PlanOverrides o;
    o.model = "llama-3.1-70b";
    o.gpu = "H100-SXM";
    o.nodes = 8;
    o.gpus_per_node = 8;
    o.seq_len = 8192;
    o.micro_batch = micro_batch;
    o.strategy = "FULL_SHARD";
    o.wrap = "block";
    o.ac = "full";
    return o;
}

void render(QWidget& w, QImage& image) {
    QPainter painter(&image);
    w.render(&painter);
}

void BM_ReplanRedraw(benchmark::State& state) {
    sim::Evaluator evaluator;
    gui::FitView fit;
    gui::MemoryView memory;
    gui::TimelineView timeline;
    for (QWidget* w : {static_cast<QWidget*>(&fit), static_cast<QWidget*>(&memory), static_cast<QWidget*>(&timeline)}) {
        w->resize(1100, 800);
    }
    QImage image(1100, 800, QImage::Format_ARGB32_Premultiplied);
    int64_t mb = 1;
    int64_t tasks = 0;
    for (auto _ : state) {
        auto plan = gui::computePlan(llama70b(mb), evaluator, nullptr);
        if (!plan) {
            state.SkipWithError(plan.error().message.c_str());
            return;
        }
        std::shared_ptr<const gui::PlanResult> result = std::move(plan).value();
        fit.setPlan(result);
        memory.setPlan(result);
        timeline.setPlan(result);
        render(fit, image);
        render(memory, image);
        render(timeline, image);
        tasks = result->eval.program.size();
        mb = 3 - mb;
    }
    state.counters["tasks"] = static_cast<double>(tasks);
}
BENCHMARK(BM_ReplanRedraw)->Unit(benchmark::kMillisecond)->UseRealTime();

// The fit view's bars: the other four strategies evaluated (after the plan is shown).
void BM_StrategyBars(benchmark::State& state) {
    sim::Evaluator evaluator;
    auto plan = gui::computePlan(llama70b(1), evaluator, nullptr);
    if (!plan) {
        state.SkipWithError(plan.error().message.c_str());
        return;
    }
    gui::FitView fit;
    fit.resize(1100, 800);
    fit.setPlan(*plan);
    QImage image(1100, 800, QImage::Format_ARGB32_Premultiplied);
    for (auto _ : state) {
        auto strategies = gui::computeStrategies(**plan, evaluator, nullptr);
        fit.setStrategies(std::move(strategies).value());
        render(fit, image);
    }
}
BENCHMARK(BM_StrategyBars)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WrapViewRefresh(benchmark::State& state) {
    sim::Evaluator evaluator;
    auto plan = gui::computePlan(llama70b(1), evaluator, nullptr);
    if (!plan) {
        state.SkipWithError(plan.error().message.c_str());
        return;
    }
    gui::WrapView view;
    view.resize(1100, 800);
    QImage image(1100, 800, QImage::Format_ARGB32_Premultiplied);
    size_t candidates = 0;
    for (auto _ : state) {
        auto wrap = gui::computeWrap(**plan, nullptr);
        if (!wrap) {
            state.SkipWithError(wrap.error().message.c_str());
            return;
        }
        candidates = (*wrap)->sweep.size();
        view.setResult(std::move(wrap).value());
        render(view, image);
    }
    state.counters["candidates"] = static_cast<double>(candidates);
}
BENCHMARK(BM_WrapViewRefresh)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
