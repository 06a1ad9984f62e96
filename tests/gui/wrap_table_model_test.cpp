// The wrap view's table model over a real sweep (gui/views/wrap_table_model.hpp), checked with
// QAbstractItemModelTester, and its numbers against the sweep's.
#include <QAbstractItemModelTester>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "core/plan/plan_build.hpp"
#include "gui/state/plan_results.hpp"
#include "gui/views/wrap_table_model.hpp"

using namespace shardcast;

namespace {
std::shared_ptr<gui::WrapResult> tinySweep() {
    core::PlanOverrides o;
    o.model = "tiny-llama";
    o.gpus_per_node = 4;
    o.seq_len = 512;
    sim::Evaluator evaluator;
    auto plan = gui::computePlan(o, evaluator, nullptr);
    if (!plan) qFatal("%s", plan.error().message.c_str());
    auto wrap = gui::computeWrap(**plan, nullptr);
    if (!wrap) qFatal("%s", wrap.error().message.c_str());
    return std::move(wrap).value();
}
}  // namespace

class WrapTableModelTest : public QObject {
    Q_OBJECT
private slots:
    void passesTheModelTester() {
        gui::WrapTableModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        auto result = tinySweep();
        model.setResult(result);
        QCOMPARE(model.rowCount(), static_cast<int>(result->sweep.size()));
        QVERIFY(model.rowCount() > 4);
        model.setResult(nullptr);
        QCOMPARE(model.rowCount(), 0);
    }

    void cellsAreTheSweepsNumbers() {
        gui::WrapTableModel model;
        auto result = tinySweep();
        model.setResult(result);
        for (int row = 0; row < model.rowCount(); ++row) {
            const sim::SweepResult& r = result->sweep[static_cast<size_t>(row)];
            QCOMPARE(model.index(row, gui::WrapTableModel::Strategy).data().toString(),
                     QString::fromStdString(std::string(core::strategyName(r.candidate.strategy))));
            if (!r.ok) continue;
            QCOMPARE(model.index(row, gui::WrapTableModel::Step).data(gui::WrapTableModel::kSortRole).toDouble(), r.step_s);
            QCOMPARE(model.index(row, gui::WrapTableModel::Step).data().toString(), QString::number(r.step_s * 1e3, 'f', 2));
            QCOMPARE(model.index(row, gui::WrapTableModel::Units).data().toInt(), r.units);
            QCOMPARE(model.index(row, gui::WrapTableModel::Fits).data().toString(), QString(r.fits ? "yes" : "no"));
        }
        int on_front = 0;
        for (int row = 0; row < model.rowCount(); ++row) {
            on_front += model.index(row, gui::WrapTableModel::Front).data().toString() == "yes" ? 1 : 0;
        }
        QCOMPARE(on_front, static_cast<int>(result->front.size()));
    }

    // Sorted through a proxy by the sort role, the step column is numerically increasing (a text
    // sort would put "10.00" before "9.00").
    void sortsNumerically() {
        gui::WrapTableModel model;
        model.setResult(tinySweep());
        QSortFilterProxyModel proxy;
        QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        proxy.setSourceModel(&model);
        proxy.setSortRole(gui::WrapTableModel::kSortRole);
        proxy.sort(gui::WrapTableModel::Peak, Qt::AscendingOrder);
        double last = -1;
        for (int row = 0; row < proxy.rowCount(); ++row) {
            const double v = proxy.index(row, gui::WrapTableModel::Peak).data(gui::WrapTableModel::kSortRole).toDouble();
            QVERIFY(v >= last);
            last = v;
        }
        // kCandidateRole maps a proxy row back to its sweep index.
        const int candidate = proxy.index(0, 0).data(gui::WrapTableModel::kCandidateRole).toInt();
        QCOMPARE(model.index(candidate, gui::WrapTableModel::Peak).data(gui::WrapTableModel::kSortRole).toDouble(),
                 proxy.index(0, gui::WrapTableModel::Peak).data(gui::WrapTableModel::kSortRole).toDouble());
    }
};

QTEST_GUILESS_MAIN(WrapTableModelTest)
#include "wrap_table_model_test.moc"
