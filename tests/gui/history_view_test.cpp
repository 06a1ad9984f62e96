// The History view over a real store in a temporary folder (built only with db/): the table lists
// what was saved and passes the model tester, the search filters it, and opening a plan hands its
// self-contained JSON to the window, which loads it into the knobs.
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QtTest>

#include "core/plan.hpp"
#include "db/store.hpp"
#include "gui/history_view.hpp"
#include "gui/input_panel.hpp"
#include "gui/main_window.hpp"
#include "gui/planner.hpp"

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

    void saveToStoreAddsThePlan() {
        gui::MainWindow window(gui::MainWindow::Options{false});
        QVERIFY(window.openPlan(kExample).ok());
        QVERIFY(window.inputs()->setKnob("grad-accum", "7"));
        QVERIFY(window.planner()->waitUntilFinished(120'000));
        auto id = window.saveToStore();
        QVERIFY2(id.ok(), id.ok() ? "" : id.error().message.c_str());
        auto store = db::Store::open(m_db, false);
        QVERIFY(store.ok());
        auto parsed = db::parseId(*id);
        QVERIFY(parsed.ok());
        auto object = (*store)->get(*parsed);
        QVERIFY(object.ok());
        QCOMPARE(object->body.at("plan").at("training").at("grad_accum").get<int>(), 7);
    }
};

QTEST_MAIN(HistoryViewTest)
#include "history_view_test.moc"
