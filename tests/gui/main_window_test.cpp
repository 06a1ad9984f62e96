// The window end to end, offscreen: a knob change re-plans off the UI thread and the views show
// the new plan's numbers, the same as sim::evaluatePlan of the plan built from the same overrides
// (the CLI's numbers); a bad input shows an error next to its field and keeps the previous plan.
#include <QAbstractItemModel>
#include <QLabel>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "core/plan/plan_build.hpp"
#include "gui/app/input_panel.hpp"
#include "gui/app/main_window.hpp"
#include "gui/app/module_tree.hpp"
#include "gui/state/plan_results.hpp"
#include "gui/state/planner.hpp"
#include "gui/views/fit_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui/views/wrap_table_model.hpp"
#include "gui/views/wrap_view.hpp"
#include "gui/widgets/palette.hpp"
#include "search/optimize.hpp"
#include "simulator/evaluation.hpp"

using namespace shardcast;

namespace {

constexpr int kWaitMs = 120'000;
const QString kExample = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";

// What the command line computes for these overrides.
sim::Evaluation reference(const core::PlanOverrides& o) {
    auto plan = core::buildPlan(o);
    if (!plan) qFatal("%s", plan.error().message.c_str());
    auto e = sim::evaluatePlan(*plan, nullptr);
    if (!e) qFatal("%s", e.error().message.c_str());
    return std::move(e).value();
}

core::PlanOverrides exampleWith(auto&& tweak) {
    core::PlanOverrides o;
    o.plan_file = kExample.toStdString();
    tweak(o);
    return o;
}

}  // namespace

class MainWindowTest : public QObject {
    Q_OBJECT
private:
    std::unique_ptr<gui::MainWindow> m_window;

    void checkShows(const sim::Evaluation& ref) {
        const gui::PlanResult* shown = m_window->currentPlan();
        QVERIFY(shown != nullptr);
        QCOMPARE(shown->eval.summary.step_s, ref.summary.step_s);
        QCOMPARE(shown->eval.summary.peak_bytes, ref.summary.peak_bytes);
        QCOMPARE(shown->eval.summary.mfu, ref.summary.mfu);
        const QString headline = m_window->fitView()->headlineText();
        QVERIFY2(headline.contains("step " + gui::formatMs(ref.summary.step_s)), qPrintable(headline));
        QVERIFY2(headline.contains("peak " + gui::formatGiB(ref.summary.peak_bytes)), qPrintable(headline));
        QVERIFY2(headline.contains(QString("MFU %1").arg(ref.summary.mfu, 0, 'f', 3)), qPrintable(headline));
        QVERIFY2(headline.startsWith(ref.fit.fits ? "Fits" : (ref.fit.at_risk ? "At risk" : "Does not fit")),
                 qPrintable(headline));
        QVERIFY(ref.fit.reserved_bytes > ref.summary.peak_bytes);  // the caching allocator is modelled
        QVERIFY2(headline.contains("reserved " + gui::formatGiB(ref.fit.reserved_bytes)), qPrintable(headline));
        // The timeline view draws that plan's timeline.
        const gui::TimelineView* tv = m_window->timelineView();
        QVERIFY(tv->plan() == shown);
        QVERIFY(tv->plan()->eval.timeline == ref.timeline);
        QCOMPARE(tv->canvas()->spanNs(), ref.timeline.step_ns);
    }

private slots:
    void init() {
        m_window = std::make_unique<gui::MainWindow>(gui::MainWindow::Options{false});
        m_window->resize(1400, 900);
        m_window->show();
        QVERIFY(m_window->openPlan(kExample).ok());
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
    }
    void cleanup() { m_window.reset(); }

    void firstScreenIsTheExample() {
        checkShows(reference(exampleWith([](core::PlanOverrides&) {})));
        QCOMPARE(m_window->inputs()->knobText("model"), QString("llama-3.1-8b"));
        QCOMPARE(m_window->inputs()->knobText("ac"), QString("layer:2"));
    }

    void strategyKnobReplans() {
        const sim::Evaluation before = reference(exampleWith([](core::PlanOverrides&) {}));
        const sim::Evaluation after = reference(exampleWith([](core::PlanOverrides& o) { o.strategy = "SHARD_GRAD_OP"; }));
        QVERIFY(before.summary.peak_bytes != after.summary.peak_bytes);
        QVERIFY(m_window->inputs()->setKnob("strategy", "SHARD_GRAD_OP"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QCOMPARE(m_window->currentPlan()->plan.sharding.strategy, core::Strategy::ShardGradOp);
        checkShows(after);
    }

    void microBatchKnobReplans() {
        const sim::Evaluation after = reference(exampleWith([](core::PlanOverrides& o) { o.micro_batch = 2; }));
        QVERIFY(m_window->inputs()->setKnob("micro-batch", "2"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QCOMPARE(m_window->currentPlan()->plan.training.micro_batch, int64_t{2});
        checkShows(after);
    }

    // Several changes in a row: stale generations are cancelled or dropped; the last one is shown.
    void staleResultsAreDropped() {
        for (int mb = 2; mb <= 5; ++mb) QVERIFY(m_window->inputs()->setKnob("micro-batch", QString::number(mb)));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QCOMPARE(m_window->currentPlan()->generation, m_window->planner()->latestGeneration());
        checkShows(reference(exampleWith([](core::PlanOverrides& o) { o.micro_batch = 5; })));
    }

    void badConfigShowsAnErrorAndKeepsThePlan() {
        const double step_before = m_window->currentPlan()->eval.summary.step_s;
        const QString headline_before = m_window->fitView()->headlineText();
        QTemporaryDir dir;
        const QString bad = dir.filePath("config.json");
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"model_type\": \"llama\", \"hidden_size\": ");
        f.close();
        m_window->inputs()->openModelFile(bad);
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        const QString error = m_window->inputs()->errorText("model");
        QVERIFY2(error.contains("--model") && error.contains("config.json"), qPrintable(error));
        QVERIFY(m_window->inputs()->errorText("").isEmpty());
        QCOMPARE(m_window->currentPlan()->eval.summary.step_s, step_before);
        QCOMPARE(m_window->fitView()->headlineText(), headline_before);
        // A good value clears the error.
        QVERIFY(m_window->inputs()->setKnob("model", "llama-3.1-8b"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QVERIFY(m_window->inputs()->errorText("model").isEmpty());
    }

    // An invalid plan (validation names the plan field) shows its error under that knob.
    void invalidShardSizeErrorUnderItsKnob() {
        QVERIFY(m_window->inputs()->setKnob("shard-size", "3"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        const QString error = m_window->inputs()->errorText("shard-size");
        QVERIFY2(!error.isEmpty(), qPrintable(m_window->inputs()->errorText("")));
        QCOMPARE(m_window->currentPlan()->plan.sharding.shard_size, 0);
    }

    void clickingAStrategyBarSwitchesTheStrategy() {
        gui::StrategyBars* bars = m_window->fitView()->bars();
        QApplication::processEvents();
        // Bars are in core::Strategy order: index 1 is SHARD_GRAD_OP.
        const QRectF bar = bars->barRect(1);
        QVERIFY(!bar.isEmpty());
        QTest::mouseClick(bars, Qt::LeftButton, {}, bar.center().toPoint());
        QCOMPARE(m_window->inputs()->knobText("strategy"), QString("SHARD_GRAD_OP"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QCOMPARE(m_window->currentPlan()->plan.sharding.strategy, core::Strategy::ShardGradOp);
    }

    void clickingAWrapRowLoadsThatPlan() {
        gui::WrapView* wrap = m_window->wrapView();
        QTableView* table = wrap->table();
        QVERIFY(table->model()->rowCount() > 0);
        m_window->showView("wrap");
        QApplication::processEvents();
        // The row of a FULL_SHARD every:2 candidate without AC.
        int row = -1;
        for (int r = 0; r < table->model()->rowCount(); ++r) {
            const auto cell = [&](int col) { return table->model()->index(r, col).data().toString(); };
            if (cell(gui::WrapTableModel::Strategy) == "FULL_SHARD" && cell(gui::WrapTableModel::Wrap) == "every:2" &&
                cell(gui::WrapTableModel::Ac) == "none") {
                row = r;
            }
        }
        QVERIFY(row >= 0);
        table->scrollTo(table->model()->index(row, 0));
        const QRect cell = table->visualRect(table->model()->index(row, 1));
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, cell.center());
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        const core::Plan& p = m_window->currentPlan()->plan;
        QCOMPARE(p.sharding.strategy, core::Strategy::FullShard);
        QCOMPARE(QString::fromStdString(core::wrapPolicyString(p.sharding.wrap)), QString("every:2"));
        QCOMPARE(p.training.ac, core::Checkpointing::None);
        checkShows(reference(exampleWith([](core::PlanOverrides& o) {
            o.strategy = "FULL_SHARD";
            o.wrap = "every:2";
            o.ac = "none";
            o.micro_batch = 1;
        })));
        QVERIFY(wrap->pytorchCode().contains("fully_shard("));
    }

    // The module tree as a unit picker: exactly the checked modules become units.
    void wrappingCheckedModules() {
        gui::ModuleTree* tree = m_window->moduleTree();
        QCOMPARE(tree->checkedModules().size(), 32);  // wrap=block: every decoder layer
        for (const QString& fqn : tree->checkedModules()) tree->setChecked(fqn, false);
        tree->setChecked("model.layers.0", true);
        tree->setChecked("model.layers.5", true);
        tree->applyChecked();
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        const gui::PlanResult* shown = m_window->currentPlan();
        QCOMPARE(shown->plan.sharding.wrap.kind, core::WrapKind::Modules);
        QCOMPARE(shown->plan.sharding.wrap.modules, (std::vector<std::string>{"model.layers.0", "model.layers.5"}));
        QCOMPARE(shown->eval.program.units.size(), size_t{3});  // the root and the two checked
        QCOMPARE(tree->checkedModules(), (QStringList{"model.layers.0", "model.layers.5"}));
        const std::string wrap = "modules:" + m_window->inputs()->knobText("wrap").mid(8).toStdString();
        checkShows(reference(exampleWith([&wrap](core::PlanOverrides& o) { o.wrap = wrap; })));
    }

    // The exact wrap search's grouping drawn on the module tree: every module of a searched unit
    // shows that unit's number, in the search's order.
    void searchGroupingOnTheModuleTree() {
        const gui::PlanResult* shown = m_window->currentPlan();
        auto wrap = gui::computeWrap(*shown, nullptr);
        QVERIFY(wrap.ok() && (*wrap)->search_ok);
        const std::vector<std::string>& units = (*wrap)->search.wrap.modules;
        QVERIFY(!units.empty());
        gui::ModuleTree* tree = m_window->moduleTree();
        int modules_seen = 0;
        for (size_t i = 0; i < units.size(); ++i) {
            for (const QString& fqn : QString::fromStdString(units[i]).split('+')) {
                const QString label = tree->searchUnit(fqn);
                QVERIFY2(label.startsWith(QString("%1: ").arg(i + 1)), qPrintable(fqn + " -> " + label));
                ++modules_seen;
            }
        }
        QCOMPARE(modules_seen, 32);  // every decoder layer is in exactly one searched unit
        QVERIFY(tree->searchUnit("").isEmpty());  // the root is in none
        // A block's children are drawn in their block's unit.
        QCOMPARE(tree->searchUnit("model.layers.0.self_attn"), tree->searchUnit("model.layers.0"));
    }

    // The wrap view runs `shardcast optimize` on the current inputs and loads its winner: the same
    // winner and score as sim::optimize on the same plan, and the loaded plan is that configuration.
    void optimizerRunsAndLoadsTheWinner() {
        const gui::PlanResult* shown = m_window->currentPlan();
        sim::OptimizeOptions options;
        options.global_batch = shown->plan.training.micro_batch * shown->plan.training.grad_accum * 8;
        options.headroom = shown->eval.fit.headroom;
        auto ref = sim::optimize(shown->plan, sim::OptimizeSpace{}, shown->profile.profile, options);
        QVERIFY2(ref.ok(), ref.ok() ? "" : ref.error().message.c_str());
        QVERIFY(ref->fits);
        m_window->startOptimize();
        QVERIFY(m_window->waitForOptimize(kWaitMs));
        const gui::OptimizeRun* run = m_window->optimizeRun();
        QCOMPARE(run->global_batch, options.global_batch);
        QCOMPARE(run->result.best.step_s, ref->best.step_s);
        QCOMPARE(gui::describeChoice(run->result.best.choice), gui::describeChoice(ref->best.choice));
        const QString text = m_window->wrapView()->optimizeText();
        QVERIFY2(text.contains(QString::fromStdString(gui::describeChoice(ref->best.choice)).toHtmlEscaped()), qPrintable(text));
        QCOMPARE(run->result.at_risk.size(), ref->at_risk.size());
        if (!ref->at_risk.empty()) {
            // Faster configurations whose reserved peak misses are named, the fastest first.
            QVERIFY2(text.contains(QString("%1 faster configuration(s) AT RISK").arg(ref->at_risk.size())), qPrintable(text));
            QVERIFY2(text.contains(QString::fromStdString(gui::describeChoice(ref->at_risk.front().choice)).toHtmlEscaped()),
                     qPrintable(text));
        }
        QVERIFY(m_window->loadOptimizeWinner().ok());
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        const gui::PlanResult* loaded = m_window->currentPlan();
        QCOMPARE(loaded->eval.summary.step_s, ref->best.step_s);
        QCOMPARE(loaded->plan.sharding.strategy, ref->best.choice.strategy);
        QCOMPARE(loaded->plan.training.micro_batch, ref->best.choice.micro_batch);
        QCOMPARE(loaded->plan.training.grad_accum, ref->best.choice.grad_accum);
    }

    // Window geometry and recent files outlive the window (QSettings, organisation "shardcast").
    void settingsAreRemembered() {
        QTemporaryDir dir;
        QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, dir.path());
        {
            gui::MainWindow first(gui::MainWindow::Options{true});
            first.resize(1100, 750);
            first.show();
            QVERIFY(first.openPlan(kExample).ok());
            QVERIFY(first.planner()->waitUntilFinished(kWaitMs));
            first.close();
        }
        gui::MainWindow second(gui::MainWindow::Options{true});
        QCOMPARE(second.size(), QSize(1100, 750));
        const QStringList recent = QSettings("shardcast", "shardcast-gui").value("recentFiles").toStringList();
        QCOMPARE(recent, QStringList{QFileInfo(kExample).absoluteFilePath()});
    }

    void savedPlanReadsBack() {
        QVERIFY(m_window->inputs()->setKnob("grad-accum", "4"));
        QVERIFY(m_window->planner()->waitUntilFinished(kWaitMs));
        QTemporaryDir dir;
        const QString path = dir.filePath("saved.json");
        QVERIFY(m_window->savePlan(path).ok());
        auto back = core::loadPlanFile(path.toStdString());
        QVERIFY(back.ok());
        QCOMPARE(back->training.grad_accum, int64_t{4});
        const QString trace = dir.filePath("trace.json");
        QVERIFY(m_window->exportChromeTrace(trace).ok());
        QVERIFY(QFileInfo(trace).size() > 1000);
    }
};

QTEST_MAIN(MainWindowTest)
#include "main_window_test.moc"
