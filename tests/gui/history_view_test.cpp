// The History view over a real store in a temporary folder (built only with db/): the table lists
// what was saved and passes the model tester, the search filters it, and opening a plan hands its
// self-contained JSON to the window, which loads it into the knobs.
#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QtTest>

#include "core/plan/plan.hpp"
#include "db/store.hpp"
#include "gui/app/input_panel.hpp"
#include "gui/app/main_window.hpp"
#include "gui/state/planner.hpp"
#include "gui/views/history_view.hpp"
#include "planstore/planstore.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

using namespace shardcast;

namespace {
const QString kExample = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";
}

class HistoryViewTest : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    std::filesystem::path m_db;

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        m_db = m_dir.filePath("store.db").toStdString();
        qputenv("SHARDCAST_DB", QByteArray::fromStdString(m_db.string()));
        auto store = db::Store::open(m_db, true);
        QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
        auto plan = core::loadPlanFile(kExample.toStdString());
        QVERIFY(plan.ok());
        plan->training.micro_batch = 3;
        auto doc = core::selfContainedPlanJson(*plan);
        QVERIFY(doc.ok());
        QVERIFY((*store)->savePlan(*doc, "mb3-plan", "llama-3.1-8b, 8x H100-SXM, FULL_SHARD").ok());
        plan->training.micro_batch = 2;
        QVERIFY((*store)->savePlan(*core::selfContainedPlanJson(*plan), "mb2-plan", "llama-3.1-8b mb2").ok());
    }

    void listsAndSearches() {
        gui::HistoryView view;
        QAbstractItemModelTester tester(view.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester proxy_tester(view.proxy(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        view.setStorePath(m_db);
        QVERIFY(view.refresh().ok());
        QCOMPARE(view.model()->rowCount(), 2);
        view.setSearch("MB3");
        QCOMPARE(view.proxy()->rowCount(), 1);
        QCOMPARE(view.proxy()->index(0, gui::HistoryModel::Name).data().toString(), QString("mb3-plan"));
        view.setSearch("no such thing");
        QCOMPARE(view.proxy()->rowCount(), 0);
        view.setSearch("");
        QCOMPARE(view.proxy()->rowCount(), 2);
    }

    void openingAPlanLoadsItIntoTheWindow() {
        gui::MainWindow window(gui::MainWindow::Options{false});
        QVERIFY(window.historyView() != nullptr);
        QVERIFY(window.openPlan(kExample).ok());
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        QCOMPARE(window.currentPlan()->plan.training.micro_batch, int64_t{1});
        gui::HistoryView* view = window.historyView();
        view->setStorePath(m_db);
        QVERIFY(view->refresh().ok());
        view->setSearch("mb3-plan");
        QCOMPARE(view->proxy()->rowCount(), 1);
        QVERIFY(view->openRow(0).ok());
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        QCOMPARE(window.currentPlan()->plan.training.micro_batch, int64_t{3});
        QCOMPARE(window.inputs()->knobText("micro-batch"), QString("3"));
    }

    // "Save to store" stores what `simulate --save` stores: the prediction of the plan shown, linked
    // to its plan and the profile it was timed with. (After the listing tests: it adds rows.)
    void saveToStoreSavesThePrediction() {
        gui::MainWindow window(gui::MainWindow::Options{false});
        QVERIFY(window.openPlan(kExample).ok());
        QVERIFY(window.inputs()->setKnob("grad-accum", "7"));
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        auto saved = window.saveToStore();
        QVERIFY2(saved.ok(), saved.ok() ? "" : saved.error().message.c_str());
        const QStringList words = QString::fromStdString(*saved).remove('(').remove(')').split(' ');
        QCOMPARE(words.size(), 3);  // "pred-N (plan plan-M)"
        auto store = db::Store::open(m_db, false);
        QVERIFY(store.ok());
        auto prediction_id = db::parseId(words[0].toStdString());
        auto plan_id = db::parseId(words[2].toStdString());
        QVERIFY(prediction_id.ok() && plan_id.ok());
        auto prediction = (*store)->get(*prediction_id);
        QVERIFY2(prediction.ok(), prediction.ok() ? "" : prediction.error().message.c_str());
        const gui::PlanResult* shown = window.currentPlan();
        QCOMPARE(prediction->body.at("summary").at("step_s").get<double>(), shown->eval.summary.step_s);
        QCOMPARE(prediction->body.at("summary").at("peak_bytes").get<int64_t>(), shown->eval.summary.peak_bytes);
        QCOMPARE(prediction->body.at("plan").get<std::string>(), words[2].toStdString());
        QVERIFY(prediction->body.at("profile").is_string());  // the documented figures, stored once
        QVERIFY(prediction->body.at("memory").contains("curve"));
        auto plan = (*store)->get(*plan_id);
        QVERIFY(plan.ok());
        QCOMPARE(plan->body.at("plan").at("training").at("grad_accum").get<int>(), 7);
    }

    // A profile stored by `calibrate --save NAME` is offered by the profile knob, and choosing it
    // times the plan with its figures: the step equals sim::evaluatePlan with that profile.
    void storedProfileTimesThePlan() {
        auto plan = core::loadPlanFile(kExample.toStdString());
        QVERIFY(plan.ok());
        sim::HardwareProfile slow = sim::HardwareProfile::fromCluster(plan->cluster);
        for (double* flops : {&slow.gpu.peak_flops_bf16, &slow.gpu.peak_flops_fp16, &slow.gpu.peak_flops_tf32,
                              &slow.gpu.peak_flops_fp32, &slow.gpu.peak_flops_fp8}) {
            *flops /= 2;
        }
        {
            auto store = db::Store::open(m_db, false);
            QVERIFY(store.ok());
            QVERIFY(planstore::saveCalibratedProfile(**store, slow, "half-speed").ok());
        }
        gui::MainWindow window(gui::MainWindow::Options{false});
        QVERIFY(window.openPlan(kExample).ok());
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        const double documented = window.currentPlan()->eval.summary.step_s;
        auto* box = qobject_cast<QComboBox*>(window.inputs()->knobEditor("profile"));
        QVERIFY(box != nullptr);
        QVERIFY(box->findText("half-speed") > 0);
        QVERIFY(window.inputs()->setKnob("profile", "half-speed"));
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        const gui::PlanResult* shown = window.currentPlan();
        QCOMPARE(shown->profile.source, std::string("calibrated"));
        QVERIFY(shown->profile.stored.has_value());
        auto ref = sim::evaluatePlan(*plan, &slow);
        QVERIFY(ref.ok());
        QCOMPARE(shown->eval.summary.step_s, ref->summary.step_s);
        QVERIFY(shown->eval.summary.step_s > documented * 1.2);
        // A name that is neither a file nor stored: the error sits under the profile knob.
        QVERIFY(window.inputs()->setKnob("profile", "no-such-profile"));
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        QVERIFY2(window.inputs()->errorText("profile").contains("half-speed"),
                 qPrintable(window.inputs()->errorText("profile")));
        QCOMPARE(window.currentPlan()->eval.summary.step_s, ref->summary.step_s);  // the previous plan stays
    }

};

QTEST_MAIN(HistoryViewTest)
#include "history_view_test.moc"
