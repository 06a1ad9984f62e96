#include "gui/widgets/timeline_canvas.hpp"

#include <algorithm>
#include <cmath>

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include "core/memory/memory.hpp"
#include "core/results/compare.hpp"
#include "gui/widgets/palette.hpp"
#include "gui/widgets/plot_axes.hpp"

namespace shardcast::gui {

namespace {

// Merged intervals of every task on the compute stream of `t`.
std::vector<std::pair<int64_t, int64_t>> computeBusy(const core::Timeline& t) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const core::TaskTime& tt : t.tasks) {
        if (tt.stream == core::Stream::Compute && tt.end_ns > tt.start_ns) busy.emplace_back(tt.start_ns, tt.end_ns);
    }
    std::sort(busy.begin(), busy.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& b : busy) {
        if (!merged.empty() && b.first <= merged.back().second) {
            merged.back().second = std::max(merged.back().second, b.second);
        } else {
            merged.push_back(b);
        }
    }
    return merged;
}
}  // namespace

TimelineCanvas::TimelineCanvas(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setMinimumHeight(200);
}

void TimelineCanvas::clear() {
    m_owner.reset();
    m_program = nullptr;
    m_tracks.clear();
    m_memory = nullptr;
    update();
}

void TimelineCanvas::setData(std::shared_ptr<const void> owner, const core::Program* program,
                             std::vector<TimelineTrack> tracks, const core::TimedMemory* memory,
                             std::function<QColor(int32_t, int)> color, std::function<QString(int32_t, int)> extra) {
    const bool keep_zoom = m_program != nullptr && !m_axis.isReset();
    const double keep_start = m_axis.startNs(), keep_scale = m_axis.nsPerPixel();
    m_owner = std::move(owner);
    m_program = program;
    m_memory = memory;
    m_color = std::move(color);
    m_extra = std::move(extra);
    m_tracks.clear();
    int64_t span = 1;
    for (TimelineTrack& t : tracks) {
        Lane lane;
        lane.track = t;
        const core::Timeline& tl = *t.timeline;
        span = std::max(span, tl.step_ns);
        for (int32_t id = 0; id < static_cast<int32_t>(tl.tasks.size()); ++id) {
            if (tl.tasks[static_cast<size_t>(id)].stream == t.stream) lane.tasks.push_back(id);
        }
        std::stable_sort(lane.tasks.begin(), lane.tasks.end(), [&tl](int32_t a, int32_t b) {
            return tl.tasks[static_cast<size_t>(a)].start_ns < tl.tasks[static_cast<size_t>(b)].start_ns;
        });
        if (t.highlight_exposed && t.stream != core::Stream::Compute) {
            const auto busy = computeBusy(tl);
            for (int32_t id : lane.tasks) {
                if (!core::isCollective(program->tasks[static_cast<size_t>(id)].kind)) continue;
                int64_t from = tl.tasks[static_cast<size_t>(id)].start_ns;
                const int64_t to = tl.tasks[static_cast<size_t>(id)].end_ns;
                auto it = std::lower_bound(busy.begin(), busy.end(), std::make_pair(from, int64_t{0}),
                                           [](const auto& a, const auto& b) { return a.second < b.first; });
                for (; from < to; ++it) {
                    const int64_t gap_end = it == busy.end() ? to : std::min(to, it->first);
                    if (gap_end > from) lane.exposed.emplace_back(from, gap_end);
                    if (it == busy.end()) break;
                    from = std::max(from, it->second);
                }
            }
        }
        m_tracks.push_back(std::move(lane));
    }
    m_axis.setSpan(span);
    updateViewport();
    if (keep_zoom) {
        m_axis.zoomAround(m_axis.leftPx(), m_axis.nsPerPixel() / keep_scale);
        m_axis.panPixels((m_axis.startNs() - keep_start) / m_axis.nsPerPixel());
    }
    setMinimumHeight(static_cast<int>(kRulerHeight + kLaneHeight * static_cast<double>(m_tracks.size()) +
                                      (m_memory ? kMemoryLaneHeight + 10 : 0) + 10));
    update();
}

void TimelineCanvas::updateViewport() { m_axis.setViewport(kLabelWidth, std::max(1.0, width() - kLabelWidth - 10)); }

void TimelineCanvas::resizeEvent(QResizeEvent*) { updateViewport(); }

QRectF TimelineCanvas::taskRect(int32_t id, int track) const {
    const Lane& lane = m_tracks[static_cast<size_t>(track)];
    const core::TaskTime& tt = lane.track.timeline->tasks[static_cast<size_t>(id)];
    const double x0 = m_axis.toPixel(tt.start_ns);
    const double x1 = std::max(m_axis.toPixel(tt.end_ns), x0 + 1);
    return QRectF(QPointF(x0, laneTop(track) + 3), QPointF(x1, laneTop(track) + kLaneHeight - 3));
}

std::pair<int32_t, int> TimelineCanvas::taskAt(QPointF pos) const {
    if (!m_program || pos.x() < kLabelWidth) return {-1, -1};
    const int track = static_cast<int>(std::floor((pos.y() - kRulerHeight) / kLaneHeight));
    if (track < 0 || track >= trackCount()) return {-1, -1};
    const Lane& lane = m_tracks[static_cast<size_t>(track)];
    const int64_t t = m_axis.toTime(pos.x());
    const double slack_ns = m_axis.nsPerPixel() * 1.5;  // boxes are at least a pixel wide
    const auto& times = lane.track.timeline->tasks;
    auto it = std::upper_bound(lane.tasks.begin(), lane.tasks.end(), t, [&times](int64_t v, int32_t id) {
        return v < times[static_cast<size_t>(id)].start_ns;
    });
    // Candidates: the last task starting at or before t, and its neighbour within the slack.
    for (int step = 0; step < 2 && it != lane.tasks.begin(); ++step) {
        --it;
        const core::TaskTime& tt = times[static_cast<size_t>(*it)];
        if (static_cast<double>(t) <= static_cast<double>(tt.end_ns) + slack_ns) return {*it, track};
    }
    return {-1, -1};
}

QString TimelineCanvas::taskTooltip(int32_t id, int track) const {
    const core::Task& task = m_program->tasks[static_cast<size_t>(id)];
    const core::TaskTime& tt = m_tracks[static_cast<size_t>(track)].track.timeline->tasks[static_cast<size_t>(id)];
    QString s = QString("<b>%1</b> (task %2)<br>unit: %3<br>kind: %4, stream %5, micro-batch %6")
                    .arg(QString::fromStdString(m_program->taskLabel(id)).toHtmlEscaped())
                    .arg(id)
                    .arg(QString::fromStdString(core::taskUnitName(*m_program, id)).toHtmlEscaped(),
                         toQString(core::taskKindName(task.kind)), toQString(core::streamName(tt.stream)))
                    .arg(task.micro_batch);
    if (task.comm_bytes > 0) s += "<br>bytes moved: " + QString::fromStdString(core::formatBytes(task.comm_bytes));
    if (task.hbm_bytes > 0) s += "<br>HBM bytes: " + QString::fromStdString(core::formatBytes(task.hbm_bytes));
    if (task.flops > 0) s += "<br>FLOPs: " + formatFlops(task.flops);
    s += "<br>start: " + formatDurationNs(tt.start_ns) + ", duration: " + formatDurationNs(tt.durationNs());
    if (m_extra) s += m_extra(id, track);
    return s;
}

void TimelineCanvas::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    if (!m_program) {
        p.drawText(rect(), Qt::AlignCenter, "No timeline yet");
        return;
    }
    paintRuler(p);
    for (int i = 0; i < trackCount(); ++i) paintLane(p, i);
    if (m_memory) paintMemory(p);
}

void TimelineCanvas::paintRuler(QPainter& p) {
    p.save();
    p.setPen(Qt::black);
    const double x0 = m_axis.leftPx(), x1 = x0 + m_axis.widthPx();
    const double t0 = static_cast<double>(m_axis.toTime(x0)), t1 = static_cast<double>(m_axis.toTime(x1));
    const QFontMetrics fm(p.font());
    p.drawText(QRectF(4, 0, kLabelWidth - 8, kRulerHeight), Qt::AlignLeft | Qt::AlignVCenter, "time (ms)");
    for (double v : niceTicks(t0, t1, 8)) {
        const double px = m_axis.toPixel(static_cast<int64_t>(v));
        p.setPen(QColor(0xe6, 0xe6, 0xe6));
        p.drawLine(QPointF(px, kRulerHeight), QPointF(px, height()));
        p.setPen(Qt::black);
        const QString label = QString::number(v / 1e6, 'g', 6);
        p.drawText(QPointF(px - fm.horizontalAdvance(label) / 2.0, kRulerHeight - 6), label);
    }
    p.restore();
}

void TimelineCanvas::paintLane(QPainter& p, int i) {
    const Lane& lane = m_tracks[static_cast<size_t>(i)];
    const double top = laneTop(i);
    p.save();
    if (i % 2 == 1) p.fillRect(QRectF(0, top, width(), kLaneHeight), QColor(0xf7, 0xf7, 0xf7));
    p.setPen(Qt::black);
    p.drawText(QRectF(4, top, kLabelWidth - 8, kLaneHeight), Qt::AlignLeft | Qt::AlignVCenter, lane.track.label);
    p.setClipRect(QRectF(m_axis.leftPx(), top, m_axis.widthPx(), kLaneHeight));
    const auto& times = lane.track.timeline->tasks;
    const double xl = m_axis.leftPx(), xr = xl + m_axis.widthPx();
    double last_right = -1;
    for (int32_t id : lane.tasks) {
        const core::TaskTime& tt = times[static_cast<size_t>(id)];
        const double a = m_axis.toPixel(tt.start_ns), b = std::max(m_axis.toPixel(tt.end_ns), a + 1);
        if (b < xl || a > xr) continue;
        if (b <= last_right) continue;  // a box inside a pixel already drawn
        last_right = b;
        const QColor c = m_color ? m_color(id, i) : taskKindColor(m_program->tasks[static_cast<size_t>(id)].kind);
        const QRectF r(QPointF(a, top + 3), QPointF(b, top + kLaneHeight - 3));
        p.fillRect(r, c);
        if (r.width() > 4) {
            p.setPen(c.darker(140));
            p.drawRect(r);
        }
    }
    for (const auto& [from, to] : lane.exposed) {
        const double a = m_axis.toPixel(from), b = std::max(m_axis.toPixel(to), a + 1);
        if (b < xl || a > xr) continue;
        const QRectF r(QPointF(a, top + 1), QPointF(b, top + kLaneHeight - 1));
        p.fillRect(r, QBrush(QColor(0xc0, 0x39, 0x2b, 200), Qt::BDiagPattern));
        p.fillRect(QRectF(QPointF(a, top + kLaneHeight - 3), QPointF(b, top + kLaneHeight - 1)), QColor(0xc0, 0x39, 0x2b));
    }
    p.restore();
}

void TimelineCanvas::paintMemory(QPainter& p) {
    const double top = laneTop(trackCount()) + 10;
    const QRectF plot(m_axis.leftPx(), top, m_axis.widthPx(), kMemoryLaneHeight);
    p.save();
    p.setPen(Qt::black);
    p.drawText(QRectF(4, top, kLabelWidth - 8, kMemoryLaneHeight), Qt::AlignLeft | Qt::AlignVCenter | Qt::TextWordWrap,
               QString("memory (GiB)\npeak %1").arg(formatGiB(m_memory->peak_bytes)));
    p.setPen(Qt::gray);
    p.drawRect(plot);
    const auto& curve = m_memory->curve;
    if (curve.empty() || m_memory->peak_bytes <= 0) {
        p.restore();
        return;
    }
    const double scale = kMemoryLaneHeight / (static_cast<double>(m_memory->peak_bytes) * 1.05);
    auto y = [&](int64_t bytes) { return plot.bottom() - static_cast<double>(bytes) * scale; };
    // One vertical span per pixel column (min and max), then the outline: fast for long curves.
    QPolygonF poly;
    poly << QPointF(plot.left(), plot.bottom());
    int64_t prev = core::total(curve.front().bytes);
    for (const core::MemoryPoint& pt : curve) {
        const double x = std::clamp(m_axis.toPixel(pt.time_ns), plot.left(), plot.right());
        const int64_t v = core::total(pt.bytes);
        poly << QPointF(x, y(prev)) << QPointF(x, y(v));
        prev = v;
    }
    poly << QPointF(plot.right(), y(prev)) << QPointF(plot.right(), plot.bottom());
    p.setClipRect(plot);
    p.setPen(QColor(0x4e, 0x79, 0xa7));
    p.setBrush(QColor(0x4e, 0x79, 0xa7, 90));
    p.drawPolygon(poly);
    const double px = m_axis.toPixel(m_memory->peak_time_ns);
    p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 1, Qt::DashLine));
    p.drawLine(QPointF(px, plot.top()), QPointF(px, plot.bottom()));
    p.restore();
}

void TimelineCanvas::wheelEvent(QWheelEvent* e) {
    const double steps = e->angleDelta().y() / 120.0;
    if (steps == 0) return;
    m_axis.zoomAround(e->position().x(), std::pow(1.25, steps));
    update();
    e->accept();
}

void TimelineCanvas::mousePressEvent(QMouseEvent* e) {
    if (e->button() == Qt::LeftButton) m_drag_from = e->position();
}

void TimelineCanvas::mouseReleaseEvent(QMouseEvent*) { m_drag_from.reset(); }

void TimelineCanvas::mouseMoveEvent(QMouseEvent* e) {
    if (m_drag_from) {
        m_axis.panPixels(e->position().x() - m_drag_from->x());
        m_drag_from = e->position();
        update();
        return;
    }
    const auto [id, track] = taskAt(e->position());
    if (id < 0) {
        QToolTip::hideText();
        return;
    }
    QToolTip::showText(e->globalPosition().toPoint(), taskTooltip(id, track), this);
}

void TimelineCanvas::keyPressEvent(QKeyEvent* e) {
    const double centre = m_axis.leftPx() + m_axis.widthPx() / 2;
    if (e->key() == Qt::Key_0 && (e->modifiers() & Qt::ControlModifier)) {
        m_axis.reset();
    } else if (e->key() == Qt::Key_Plus || e->key() == Qt::Key_Equal) {
        m_axis.zoomAround(centre, 1.5);
    } else if (e->key() == Qt::Key_Minus) {
        m_axis.zoomAround(centre, 1 / 1.5);
    } else if (e->key() == Qt::Key_Left) {
        m_axis.panPixels(60);
    } else if (e->key() == Qt::Key_Right) {
        m_axis.panPixels(-60);
    } else {
        QWidget::keyPressEvent(e);
        return;
    }
    update();
}

}  // namespace shardcast::gui
