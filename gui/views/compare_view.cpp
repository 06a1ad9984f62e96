#include "gui/views/compare_view.hpp"

#include <filesystem>

#include <QDateTime>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMimeData>
#include <QStandardPaths>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>

#include "gui/widgets/palette.hpp"
#include "simulator/hardware_profile.hpp"
#ifdef SHARDCAST_GUI_WITH_STORE
#include "planstore/trace_run.hpp"
#endif

namespace shardcast::gui {

namespace {
QString percent(const std::optional<double>& e) {
    return e ? QString("%1%2%").arg(*e >= 0 ? "+" : "").arg(*e * 100, 0, 'f', 2) : QString("n/a");
}
}  // namespace

core::Result<std::shared_ptr<CompareData>> predictRun(const QString& run_path) {
    const std::string path = run_path.toStdString();
    auto run = core::loadRunRecord(path);
    if (!run) return run.error();
    auto out = std::make_shared<CompareData>();
    out->path = run_path;
    out->run = std::move(run).value();
    auto plan = core::planFromJson(out->run.plan, path + ": plan", std::filesystem::path(path).parent_path());
    if (!plan) return plan.error();
    out->plan = std::move(plan).value();
    auto profile = sim::profileFromJson(out->run.profile, path + ": profile",
                                        sim::HardwareProfile::fromCluster(out->plan.cluster));
    if (!profile) return profile.error();
    sim::EvaluationOptions options;
    options.record_curve = true;
    options.per_unit = false;
    sim::Evaluator evaluator;
    if (auto s = evaluator.evaluate(out->plan, &*profile, options, out->prediction); !s) {
        return core::makeError(path + ": plan: " + s.error().message);
    }
    const core::Program& program = out->prediction.program;
    auto c = core::compareStep(program, out->prediction.timeline, out->prediction.timed, out->run.timeline,
                               out->run.memory, core::compareOptionsFor(out->run, 10));
    if (!c) return core::makeError(path + ": timeline.tasks: " + c.error().message);
    out->comparison = std::move(c).value();
    std::vector<uint8_t> skip(static_cast<size_t>(program.size()), 0);
    for (const int32_t id : out->run.emulated_tasks) skip[static_cast<size_t>(id)] = 1;
    for (const int32_t id : out->run.unmeasured_tasks) skip[static_cast<size_t>(id)] = 1;
    out->diagnosis = sim::diagnose(out->plan, out->prediction.profile, program, out->prediction.timeline, out->run.timeline,
                                   skip, {});
    out->flagged.assign(static_cast<size_t>(program.size()), 0);
    for (const sim::Finding& f : out->diagnosis.findings) {
        for (int32_t id = 0; id < program.size() && f.unit >= 0; ++id) {
            const core::Task& t = program.tasks[static_cast<size_t>(id)];
            if (t.unit == f.unit && t.kind == core::TaskKind::AllGather) out->flagged[static_cast<size_t>(id)] = 1;
        }
    }
    out->memory = core::comparableMemoryCurves(program, out->prediction.timed, out->run);
    out->task_error.resize(static_cast<size_t>(program.size()));
    for (int32_t id = 0; id < program.size(); ++id) {
        out->task_error[static_cast<size_t>(id)] =
            core::relativeError(out->prediction.timeline.tasks[static_cast<size_t>(id)].durationNs(),
                                out->run.timeline.tasks[static_cast<size_t>(id)].durationNs());
    }
    return out;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* row = new QHBoxLayout;
    auto* open = new QPushButton("Open run record...");
    open->setToolTip("A measured run written by `shardcast run` (format shardcast-run).");
    row->addWidget(open);
#ifdef SHARDCAST_GUI_WITH_STORE
    auto* traces = new QPushButton("Open torch traces...");
    traces->setToolTip("torch.profiler traces of a real PyTorch FSDP run (.json, .json.gz; one per rank), with the plan "
                       "it trained with; or drop them on this view.");
    row->addWidget(traces);
    connect(traces, &QPushButton::clicked, this, [this] {
        const QStringList files =
            QFileDialog::getOpenFileNames(this, "Open torch.profiler traces (one per rank)", {}, "Traces (*.json *.json.gz)");
        if (!files.isEmpty()) (void)loadTraces(files);
    });
    setAcceptDrops(true);
#endif
    m_error = new QLabel;
    m_error->setStyleSheet("color: #c0392b;");
    m_error->setWordWrap(true);
    row->addWidget(m_error, 1);
    layout->addLayout(row);
    m_summary = new QLabel("Open a measured run (shardcast run ... --out RUN.json) to see it under its prediction.");
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_canvas = new TimelineCanvas;
    layout->addWidget(scrollable(m_canvas), 1);
    m_memory = new MemoryOverlay;
    m_memory->setFixedHeight(220);
    layout->addWidget(m_memory);
    m_findings = new QLabel;
    m_findings->setWordWrap(true);
    m_findings->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_findings);
    m_tasks = new QLabel;
    m_tasks->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_tasks);
    connect(open, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, "Open run record", {}, "Run records (*.json)");
        if (!path.isEmpty()) (void)loadRun(path);
    });
}

core::Status CompareView::loadRun(const QString& path) {
    auto data = predictRun(path);
    if (!data) {
        m_error->setText(QString::fromStdString(data.error().message));
        return data.error();
    }
    m_error->clear();
    m_data = std::move(data).value();
    const CompareData& d = *m_data;
    const core::Comparison& c = d.comparison;
    QString s = QString("<b>%1</b>: the %2 run (%3 ranks, %4 tasks compared); error = (predicted - measured) / measured<br>"
                        "step %5 predicted, %6 measured: <b>%7</b>; peak memory %8 predicted, %9 measured: <b>%10</b><br>"
                        "stream busy time:")
                    .arg(path.toHtmlEscaped(), toQString(d.run.backend))
                    .arg(d.run.world_size)
                    .arg(c.task_count)
                    .arg(formatDurationNs(c.predicted_step_ns), formatDurationNs(c.measured_step_ns),
                         percent(c.step_time_error), formatMemory(c.predicted_peak_bytes), formatMemory(c.measured_peak_bytes),
                         percent(c.peak_memory_error));
    for (const core::StreamComparison& sc : c.streams) s += QString(" %1 %2;").arg(toQString(core::streamName(sc.stream)), percent(sc.error));
    if (c.excluded_task_count > 0) s += QString("<br>%1 emulated collective tasks left out of the time errors").arg(c.excluded_task_count);
    s += "<br>measured lanes coloured by duration error: ";
    for (double e : {-0.5, -0.25, 0.0, 0.25, 0.5}) {
        s += QString("<span style='background:%1'>&nbsp;%2%3%&nbsp;</span> ").arg(errorColor(e).name()).arg(e > 0 ? "+" : "").arg(e * 100, 0, 'f', 0);
    }
    m_summary->setText(s);

    QString t = "<b>Tasks with the largest duration error</b><table cellspacing=4><tr><th align=left>task</th><th>predicted</th><th>measured</th><th>error</th></tr>";
    for (const core::TaskComparison& tc : c.tasks) {
        t += QString("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td><td align=right>%4</td></tr>")
                 .arg(QString::fromStdString(d.prediction.program.taskLabel(tc.id)).toHtmlEscaped(),
                      formatDurationNs(tc.predicted_ns), formatDurationNs(tc.measured_ns), percent(tc.error));
    }
    m_tasks->setText(t + "</table>");
    QString f = "<b>Findings</b> (their all-gathers outlined in magenta on the measured lanes)";
    if (d.diagnosis.findings.empty()) f += ": none";
    for (const sim::Finding& finding : d.diagnosis.findings) {
        f += "<br>&bull; " + toQString(std::string(sim::findingKindName(finding.kind))) + ": " +
             toQString(finding.message).toHtmlEscaped() + "<br>&nbsp;&nbsp;fix: " + toQString(finding.remedy).toHtmlEscaped();
        if (finding.remedy_step_ns) {
            f += QString(" (predicted step %1 &rarr; %2)")
                     .arg(formatDurationNs(d.diagnosis.predicted_step_ns), formatDurationNs(*finding.remedy_step_ns));
        }
    }
    m_findings->setText(f);

    const sim::Evaluation& e = d.prediction;
    m_memory->setCurves(d.memory, e.timeline.step_ns, d.run.timeline.step_ns,
                        d.run.memory_kind == core::RunRecord::MemoryKind::Rise);
    std::vector<TimelineTrack> tracks;
    for (const core::StreamComparison& sc : c.streams) {
        tracks.push_back(TimelineTrack{toQString(core::streamName(sc.stream)) + " (pred.)", &e.timeline, sc.stream, false});
        tracks.push_back(TimelineTrack{toQString(core::streamName(sc.stream)) + " (meas.)", &d.run.timeline, sc.stream, false});
    }
    auto shared = m_data;
    m_canvas->setData(
        m_data, &e.program, std::move(tracks), &e.timed,
        [shared](int32_t id, int track) {
            if (track % 2 == 0) return taskKindColor(shared->prediction.program.tasks[static_cast<size_t>(id)].kind);
            if (shared->flagged[static_cast<size_t>(id)] != 0) return QColor(Qt::magenta);
            const auto& err = shared->task_error[static_cast<size_t>(id)];
            return err ? errorColor(*err) : QColor(Qt::lightGray);
        },
        [shared](int32_t id, int) {
            return "<br>duration error: " + percent(shared->task_error[static_cast<size_t>(id)]) + " (predicted " +
                   formatDurationNs(shared->prediction.timeline.tasks[static_cast<size_t>(id)].durationNs()) +
                   ", measured " + formatDurationNs(shared->run.timeline.tasks[static_cast<size_t>(id)].durationNs()) + ")";
        });
    return core::Ok{};
}

QString CompareView::summaryText() const { return m_summary->text(); }

core::Status CompareView::loadTraces(const QStringList& traces, const QString& plan_path) {
#ifdef SHARDCAST_GUI_WITH_STORE
    QString plan = plan_path;
    if (plan.isEmpty()) {
        const QFileInfo first(traces.front());
        const QString beside = (first.isDir() ? QDir(first.filePath()) : first.dir()).filePath("plan.json");
        plan = QFileInfo::exists(beside) ? beside
                                         : QFileDialog::getOpenFileName(this, "The plan the traced run trained with", first.path(),
                                                                        "Plans (*.json)");
        if (plan.isEmpty()) return core::makeError("no plan chosen");
    }
    std::vector<std::string> files;
    for (const QString& t : traces) files.push_back(t.toStdString());
    auto imported = planstore::importTraceRun(files, plan.toStdString(), "", {}, trace::ImportOptions{});
    if (!imported) {
        m_error->setText(toQString(imported.error().message));
        return imported.error();
    }
    QDir dir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation));
    dir.mkpath("imported");
    const QString path = dir.filePath("imported/" + QFileInfo(plan).dir().dirName() + "-" +
                                      QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss") + ".json");
    if (auto s = core::saveRunRecord(path.toStdString(), imported->import.run); !s) {
        m_error->setText(toQString(s.error().message));
        return s.error();
    }
    if (auto s = loadRun(path); !s) return s;
    emit runImported(path);
    return core::Ok{};
#else
    (void)traces;
    (void)plan_path;
    return core::makeError("this shardcast-gui was built without the store (planstore/) that imports traces");
#endif
}

void CompareView::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

// A run record opens as one; anything else dropped is taken as traces.
void CompareView::dropEvent(QDropEvent* event) {
    QStringList files;
    for (const QUrl& url : event->mimeData()->urls()) {
        if (url.isLocalFile()) files << url.toLocalFile();
    }
    if (files.isEmpty()) return;
    event->acceptProposedAction();
    if (files.size() == 1 && files.front().endsWith(".json") && core::loadRunRecord(files.front().toStdString()).ok()) {
        (void)loadRun(files.front());
        return;
    }
    (void)loadTraces(files);
}

}  // namespace shardcast::gui
