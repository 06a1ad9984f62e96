// The painted views' hit testing and hover text, on a real evaluation of the bundled example:
// the timeline finds the task under the cursor and describes it with the Program's figures; the
// memory curve's hover lists the category sizes of the curve point in effect.
#include <QtTest>

#include "core/plan/plan_build.hpp"
#include "core/results/compare.hpp"
#include "gui/app/module_tree.hpp"
#include "gui/state/plan_results.hpp"
#include "gui/views/memory_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui/widgets/palette.hpp"

#include <QListWidget>

using namespace shardcast;

namespace {
std::shared_ptr<const gui::PlanResult> example() {
    core::PlanOverrides o;
    o.plan_file = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";
    sim::Evaluator evaluator;
    auto plan = gui::computePlan(o, evaluator, nullptr);
    if (!plan) qFatal("%s", plan.error().message.c_str());
    return std::move(plan).value();
}
}  // namespace

class ViewsTest : public QObject {
    Q_OBJECT
private slots:
    void timelineFindsAndDescribesTheTaskUnderTheCursor() {
        auto plan = example();
        gui::TimelineView view;
        view.resize(1200, 700);
        view.setPlan(plan);
        gui::TimelineCanvas* canvas = view.canvas();
        canvas->resize(1100, 500);
        QApplication::processEvents();
        QCOMPARE(canvas->trackLabel(0), QString("compute"));
        const core::Program& program = plan->eval.program;
        // The longest compute task: a box wide enough to hit in its middle.
        int32_t longest = -1;
        for (int32_t id = 0; id < program.size(); ++id) {
            const core::TaskTime& t = plan->eval.timeline.tasks[static_cast<size_t>(id)];
            if (t.stream != core::Stream::Compute) continue;
            if (longest < 0 || t.durationNs() > plan->eval.timeline.tasks[static_cast<size_t>(longest)].durationNs()) longest = id;
        }
        const QRectF box = canvas->taskRect(longest, 0);
        QVERIFY(box.width() > 3);
        const auto [id, track] = canvas->taskAt(box.center());
        QCOMPARE(id, longest);
        QCOMPARE(track, 0);
        const QString tip = canvas->taskTooltip(id, track);
        const core::Task& task = program.tasks[static_cast<size_t>(id)];
        const core::TaskTime& tt = plan->eval.timeline.tasks[static_cast<size_t>(id)];
        QVERIFY2(tip.contains(QString::fromStdString(core::taskUnitName(program, id))), qPrintable(tip));
        QVERIFY2(tip.contains(QString::fromUtf8(core::taskKindName(task.kind).data())), qPrintable(tip));
        QVERIFY2(tip.contains("FLOPs: " + gui::formatFlops(task.flops)), qPrintable(tip));
        QVERIFY2(tip.contains("start: " + gui::formatDurationNs(tt.start_ns)), qPrintable(tip));
        QVERIFY2(tip.contains("duration: " + gui::formatDurationNs(tt.durationNs())), qPrintable(tip));
        // Left of the time axis, or below the lanes: nothing.
        QCOMPARE(canvas->taskAt(QPointF(5, box.center().y())).first, -1);
        QCOMPARE(canvas->taskAt(QPointF(box.center().x(), 5)).first, -1);
    }

    // Zooming around a task keeps the same task under the cursor.
    void zoomKeepsTheTaskUnderTheCursor() {
        auto plan = example();
        gui::TimelineView view;
        view.setPlan(plan);
        gui::TimelineCanvas* canvas = view.canvas();
        canvas->resize(1100, 500);
        const QPointF at(canvas->axis().leftPx() + 300, gui::TimelineCanvas::kRulerHeight + 10);
        const int32_t before = canvas->taskAt(at).first;
        QVERIFY(before >= 0);
        canvas->axis().zoomAround(at.x(), 8.0);
        QCOMPARE(canvas->taskAt(at).first, before);
    }

    // A re-plan keeps the user's zoom and scroll position; an unzoomed view fits the new step.
    void replanKeepsTheZoom() {
        auto plan = example();
        gui::TimelineView view;
        view.setPlan(plan);
        gui::TimelineCanvas* canvas = view.canvas();
        canvas->resize(1100, 500);
        canvas->axis().zoomAround(canvas->axis().leftPx() + 200, 5.0);
        const double scale = canvas->axis().nsPerPixel(), start = canvas->axis().startNs();
        view.setPlan(example());
        QCOMPARE(canvas->axis().nsPerPixel(), scale);
        QCOMPARE(canvas->axis().startNs(), start);
        canvas->axis().reset();
        view.setPlan(example());
        QVERIFY(canvas->axis().isReset());
    }

    void memoryHoverListsTheCategoriesInEffect() {
        auto plan = example();
        gui::MemoryView view;
        view.resize(1200, 700);
        view.setPlan(plan);
        const core::TimedMemory& timed = plan->eval.timed;
        QVERIFY(!timed.curve.empty());
        gui::MemoryCurve* curve = view.curve();
        // The point in effect at the peak's time is the last one at that time; its total is the peak.
        const int i = curve->pointAt(timed.peak_time_ns);
        QVERIFY(i >= 0);
        QVERIFY(timed.curve[static_cast<size_t>(i)].time_ns <= timed.peak_time_ns);
        const QString text = curve->hoverText(timed.curve[static_cast<size_t>(i)].time_ns);
        const core::CategoryBytes& bytes = timed.curve[static_cast<size_t>(i)].bytes;
        for (int c = 0; c < core::kMemCategoryCount; ++c) {
            if (bytes[static_cast<size_t>(c)] == 0) continue;
            const QString line = QString::fromUtf8(core::categoryName(static_cast<core::MemCategory>(c)).data()) + ": " +
                                 gui::formatGiB(bytes[static_cast<size_t>(c)]);
            QVERIFY2(text.contains(line), qPrintable(line + " not in " + text));
        }
        QCOMPARE(curve->pointAt(-1), -1);
        // The peak task is listed among the tasks running at the peak.
        bool listed = false;
        const QString label = QString::fromStdString(plan->eval.program.taskLabel(timed.peak_task));
        for (int r = 0; r < view.aliveList()->count(); ++r) listed = listed || view.aliveList()->item(r)->text().startsWith(label);
        QVERIFY(listed);
    }

    // Parameters per subtree and the unit of each module under wrap=block.
    void moduleTreeShowsParamsAndUnits() {
        auto plan = example();
        gui::ModuleTree tree;
        tree.setPlan(plan);
        const core::Model& model = *plan->plan.model;
        QCOMPARE(tree.topLevelItemCount(), 1);
        QCOMPARE(tree.topLevelItem(0)->text(gui::ModuleTree::Params), QLocale::c().toString(static_cast<qlonglong>(model.numParams())));
        QMap<QString, QTreeWidgetItem*> by_fqn;
        for (QTreeWidgetItemIterator it(&tree); *it; ++it) by_fqn[(*it)->toolTip(gui::ModuleTree::Name)] = *it;
        QVERIFY(by_fqn.contains("model.layers.3") && by_fqn.contains("model.layers.3.self_attn") &&
                by_fqn.contains("model.embed_tokens"));
        QCOMPARE(by_fqn["model.layers.3"]->text(gui::ModuleTree::Unit), QString("model.layers.3"));
        QCOMPARE(by_fqn["model.layers.3.self_attn"]->text(gui::ModuleTree::Unit), QString("model.layers.3"));
        QCOMPARE(by_fqn["model.embed_tokens"]->text(gui::ModuleTree::Unit), QString("(root)"));
        int64_t block_params = 0;
        const int32_t block = model.findModule("model.layers.3");
        for (const core::Param& p : model.params) block_params += model.isWithin(p.module, block) ? p.numel() : 0;
        QCOMPARE(by_fqn["model.layers.3"]->text(gui::ModuleTree::Params), QLocale::c().toString(static_cast<qlonglong>(block_params)));
    }
};

QTEST_MAIN(ViewsTest)
#include "views_test.moc"
