#include "gui/compare_view.hpp"

#include <filesystem>

#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>

#include "gui/palette.hpp"
#include "simulator/hardware_profile.hpp"

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
                         percent(c.step_time_error), formatGiB(c.predicted_peak_bytes), formatGiB(c.measured_peak_bytes),
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

    const sim::Evaluation& e = d.prediction;
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

}  // namespace shardcast::gui
