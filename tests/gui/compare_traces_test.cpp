// The compare view with a real PyTorch run: torch.profiler traces of a CPU FSDP2 run (tests/data/
// traces) imported through the button's path (CompareView::loadTraces), offscreen. The run is shown
// under its prediction, its findings listed and their all-gathers marked, and the import announced
// for the store.
#include <QSignalSpy>
#include <QStandardPaths>
#include <QtTest>

#include "gui/views/compare_view.hpp"

using namespace shardcast;

class CompareTracesTest : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void tracesOfACpuRunShowWithFindingsMarked() {
        gui::CompareView view;
        view.resize(1400, 900);
        QSignalSpy imported(&view, &gui::CompareView::runImported);
        const QString dir = SHARDCAST_SOURCE_DIR "/tests/data/traces/llama-block-2r";
        auto s = view.loadTraces({dir});  // plan.json beside the traces
        QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
        QCOMPARE(imported.count(), 1);
        const gui::CompareData* d = view.data();
        QVERIFY(d != nullptr);
        QCOMPARE(QString::fromStdString(d->run.backend), QString("torch"));
        QCOMPARE(d->run.world_size, 2);
        QVERIFY(d->run.unmeasured_tasks.empty());
        QVERIFY(view.summaryText().contains("the torch run (2 ranks, 45 tasks compared)"));
        // On a CPU every all-gather keeps the compute stream idle: the root's is the longest.
        QVERIFY(!d->diagnosis.findings.empty());
        bool root_flagged = false;
        for (int32_t id = 0; id < d->prediction.program.size(); ++id) {
            const core::Task& t = d->prediction.program.tasks[static_cast<size_t>(id)];
            if (t.kind == core::TaskKind::AllGather && t.unit == 0) root_flagged = d->flagged[static_cast<size_t>(id)] != 0;
            if (t.kind != core::TaskKind::AllGather) QCOMPARE(d->flagged[static_cast<size_t>(id)], uint8_t{0});
        }
        QVERIFY(root_flagged);
        // The two memory curves overlaid: the trace's [memory] totals as a rise above the step's
        // start, the prediction less its steady state; their peaks are the compared peaks.
        const auto peak = [](const std::vector<core::TotalPoint>& c) {
            int64_t top = -1;
            for (const core::TotalPoint& p : c) top = std::max(top, p.bytes);
            return top;
        };
        QVERIFY(d->memory.measured.size() > 10);
        QVERIFY(d->memory.measured == d->run.memory_total_curve);
        QCOMPARE(peak(d->memory.measured), d->comparison.measured_peak_bytes);
        QCOMPARE(peak(d->memory.predicted), d->comparison.predicted_peak_bytes);
        QVERIFY(view.memoryOverlay()->curves().predicted == d->memory.predicted);
        // Both curves are drawn: pixels of each colour in the rendered overlay.
        const QImage image = view.memoryOverlay()->grab().toImage();
        int predicted_px = 0, measured_px = 0;
        for (int y = 0; y < image.height(); ++y) {
            for (int x = 0; x < image.width(); ++x) {
                const QColor c = image.pixelColor(x, y);
                predicted_px += c == gui::MemoryOverlay::predictedColour() ? 1 : 0;
                measured_px += c == gui::MemoryOverlay::measuredColour() ? 1 : 0;
            }
        }
        QVERIFY2(predicted_px > 100 && measured_px > 100, qPrintable(QString("%1 %2").arg(predicted_px).arg(measured_px)));
        // The record the view wrote reads back as the same run.
        auto back = core::loadRunRecord(imported.front().front().toString().toStdString());
        QVERIFY(back.ok());
        QCOMPARE(back->timeline, d->run.timeline);
    }

    void aTraceOfAnotherPlanIsAnErrorShownNotAnImport() {
        gui::CompareView view;
        QSignalSpy imported(&view, &gui::CompareView::runImported);
        auto s = view.loadTraces({SHARDCAST_SOURCE_DIR "/tests/data/traces/llama-block-2r"},
                                 SHARDCAST_SOURCE_DIR "/tests/data/traces/llama-block-noreshard-acfull-4r/plan.json");
        QVERIFY(!s.ok());
        QVERIFY(QString::fromStdString(s.error().message).contains("the plan has 4"));
        QCOMPARE(imported.count(), 0);
        QVERIFY(view.data() == nullptr);
    }
};

QTEST_MAIN(CompareTracesTest)
#include "compare_traces_test.moc"
