// `shardcast-gui --screenshot` as a user runs it (a child process, offscreen): every view renders
// a picture of the requested size that is not blank; bad arguments and bad plans exit 2 with one
// line on stderr.
#include <set>

#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/perturbed_run.hpp"
#ifdef SHARDCAST_GUI_WITH_STORE
#include "db/store.hpp"
#endif

using namespace shardcast;

namespace {

const QString kBin = SHARDCAST_GUI_BIN;
const QString kExample = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";

struct Outcome {
    int exit_code = -1;
    QString err;
};

Outcome runGui(const QStringList& args) {
    QProcess p;
    p.start(kBin, args);
    if (!p.waitForFinished(300'000)) return {};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromLocal8Bit(p.readAllStandardError())};
}

int distinctColors(const QImage& image) {
    std::set<QRgb> colors;
    for (int y = 0; y < image.height(); y += 3) {
        for (int x = 0; x < image.width(); x += 3) colors.insert(image.pixel(x, y));
    }
    return static_cast<int>(colors.size());
}

// The lines of `text` that are not Qt's platform chatter.
QStringList ownLines(const QString& text) {
    QStringList out;
    for (const QString& l : text.split('\n', Qt::SkipEmptyParts)) {
        if (l.startsWith("shardcast-gui")) out << l;
    }
    return out;
}

}  // namespace

class ScreenshotTest : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_run;

private slots:
    // A measured run of the example whose compute tasks took twice as long: its compare view has
    // lanes of two error colours.
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        auto plan = core::loadPlanFile(kExample.toStdString());
        QVERIFY(plan.ok());
        auto e = sim::evaluatePlan(*plan, nullptr);
        QVERIFY(e.ok());
        const core::RunRecord run = sim::testing::perturbedRun(*plan, *e, sim::testing::Perturbation{.compute_factor = 2});
        m_run = m_dir.filePath("run.json");
        QVERIFY(core::saveRunRecord(m_run.toStdString(), run).ok());
#ifdef SHARDCAST_GUI_WITH_STORE
        // The history view's store: the example plan, and the children find it through SHARDCAST_DB.
        const std::string db_path = m_dir.filePath("store.db").toStdString();
        auto store = db::Store::open(db_path, true);
        QVERIFY(store.ok());
        auto doc = core::selfContainedPlanJson(*plan);
        QVERIFY(doc.ok());
        QVERIFY((*store)->savePlan(*doc, "llama-3.1-8b example", "llama-3.1-8b, 8x H100-SXM, FULL_SHARD").ok());
        qputenv("SHARDCAST_DB", QByteArray::fromStdString(db_path));
#endif
    }

    void everyViewRendersAtTheRequestedSize_data() {
        QTest::addColumn<QString>("view");
        for (const char* v : {"fit", "memory", "timeline", "wrap", "compare"}) QTest::newRow(v) << QString(v);
#ifdef SHARDCAST_GUI_WITH_STORE
        QTest::newRow("history") << QString("history");
#endif
    }
    void everyViewRendersAtTheRequestedSize() {
        QFETCH(QString, view);
        const QString out = m_dir.filePath(view + ".png");
        QStringList args{"--screenshot", out, "--plan", kExample, "--view", view, "--size", "1200x800"};
        if (view == "compare") args << "--run" << m_run;
        const Outcome o = runGui(args);
        QVERIFY2(o.exit_code == 0, qPrintable(o.err));
        QImage image(out);
        QVERIFY(!image.isNull());
        QCOMPARE(image.size(), QSize(1200, 800));
        const int colors = distinctColors(image);
        QVERIFY2(colors > 20, qPrintable(QString("%1 distinct colours").arg(colors)));
    }

    void defaultPlanAndSvg() {
        const QString out = m_dir.filePath("fit.svg");
        const Outcome o = runGui({"--screenshot", out, "--view", "timeline"});
        QVERIFY2(o.exit_code == 0, qPrintable(o.err));
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray svg = f.readAll();
        QVERIFY(svg.contains("<svg"));
        QVERIFY(svg.contains("width=\"1400\""));  // the default size
        QVERIFY(svg.size() > 20'000);
    }

    void badInputExitsTwoWithOneLine_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("says");
        const QString out = QDir::temp().filePath("shardcast-gui-never-written.png");
        QTest::newRow("unknown view") << QStringList{"--screenshot", out, "--view", "history2"} << "--view";
        QTest::newRow("bad size") << QStringList{"--screenshot", out, "--size", "wide"} << "--size";
        QTest::newRow("missing value") << QStringList{"--screenshot"} << "--screenshot";
        QTest::newRow("unknown option") << QStringList{"--screenshot", out, "--colour"} << "--colour";
        QTest::newRow("missing plan") << QStringList{"--screenshot", out, "--plan", "/nonexistent/plan.json"}
                                      << "/nonexistent/plan.json";
    }
    void badInputExitsTwoWithOneLine() {
        QFETCH(QStringList, args);
        QFETCH(QString, says);
        const Outcome o = runGui(args);
        QCOMPARE(o.exit_code, 2);
        const QStringList lines = ownLines(o.err);
        QCOMPARE(lines.size(), 1);
        QVERIFY2(lines[0].contains(says), qPrintable(lines[0]));
    }

    void badPlanFileExitsTwo() {
        const QString bad = m_dir.filePath("bad.plan.json");
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"model\": \"llama-3.1-8b\", \"training\": {\"micro_batch\": \"one\"}}");
        f.close();
        const Outcome o = runGui({"--screenshot", m_dir.filePath("x.png"), "--plan", bad});
        QCOMPARE(o.exit_code, 2);
        QCOMPARE(ownLines(o.err).size(), 1);
        QVERIFY2(o.err.contains("bad.plan.json"), qPrintable(o.err));
        QVERIFY(!QFile::exists(m_dir.filePath("x.png")));
    }
};

QTEST_GUILESS_MAIN(ScreenshotTest)
#include "screenshot_test.moc"
