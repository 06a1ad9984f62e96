#include "gui/views/timeline_view.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QVBoxLayout>

#include "gui/widgets/palette.hpp"

namespace shardcast::gui {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel;
    m_summary->setWordWrap(true);
    m_summary->setObjectName("timeline-summary");
    layout->addWidget(m_summary);
    auto* legend_row = new QWidget;
    auto* legend = new QHBoxLayout(legend_row);
    legend->setContentsMargins(0, 0, 0, 0);
    for (int k = 0; k < core::kTaskKindCount; ++k) {
        auto* swatch = new QLabel;
        swatch->setFixedSize(12, 12);
        swatch->setStyleSheet("background: " + taskKindColor(static_cast<core::TaskKind>(k)).name() + ";");
        legend->addWidget(swatch);
        legend->addWidget(new QLabel(toQString(core::taskKindName(static_cast<core::TaskKind>(k)))));
    }
    auto* hatch = new QLabel("<span style='color:#c0392b'>&#9608;</span> exposed communication");
    legend->addWidget(hatch);
    legend->addStretch(1);
    // The legend scrolls sideways rather than widening the window.
    auto* legend_scroll = new QScrollArea;
    legend_scroll->setWidget(legend_row);
    legend_scroll->setFrameShape(QFrame::NoFrame);
    legend_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    legend_scroll->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    legend_scroll->setFixedHeight(legend_row->sizeHint().height());
    layout->addWidget(legend_scroll);
    m_canvas = new TimelineCanvas;
    layout->addWidget(scrollable(m_canvas), 1);
    auto* help = new QLabel("Wheel or +/- zooms, Ctrl+0 resets, drag or arrow keys pan; hover a task for details.");
    help->setStyleSheet("color: gray;");
    layout->addWidget(help);
}

void TimelineView::setPlan(std::shared_ptr<const PlanResult> plan) {
    m_plan = std::move(plan);
    const sim::Evaluation& e = m_plan->eval;
    std::vector<TimelineTrack> tracks;
    for (int s = 0; s < core::kStreamCount; ++s) {
        const auto stream = static_cast<core::Stream>(s);
        bool used = false;
        for (const core::TaskTime& t : e.timeline.tasks) used = used || t.stream == stream;
        if (used) tracks.push_back(TimelineTrack{toQString(core::streamName(stream)), &e.timeline, stream, true});
    }
    QString summary = QString("step %1: compute stream busy %2, exposed communication %3; %4 tasks")
                          .arg(formatMs(e.summary.step_s), formatMs(e.summary.compute_s), formatMs(e.summary.exposed_comm_s))
                          .arg(e.program.size());
    if (e.period.byPeriod()) {
        // The step was simulated by its period (sim::PeriodicStep): the lanes hold what was simulated.
        summary += QString("; simulated by its period, shown: micro-batches 0-%1 and %2 of %3 (each of the %4 between "
                           "adds %5)")
                       .arg(e.period.simulated - 2)
                       .arg(e.period.micro_batches - 1)
                       .arg(e.period.micro_batches)
                       .arg(e.period.micro_batches - e.period.simulated)
                       .arg(formatMs(static_cast<double>(e.period.period_ns) * 1e-9));
    }
    m_summary->setText(summary);
    m_canvas->setData(m_plan, &e.program, std::move(tracks), &e.timed);
}

}  // namespace shardcast::gui
