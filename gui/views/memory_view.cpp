#include "gui/views/memory_view.hpp"

#include <algorithm>
#include <cmath>

#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>

#include "core/memory/memory.hpp"
#include "core/results/compare.hpp"
#include "gui/widgets/palette.hpp"
#include "gui/widgets/plot_axes.hpp"

namespace shardcast::gui {

namespace {
QString gibLabel(double v) { return QString::number(v, 'f', 0); }
QString msLabel(double v) { return QString::number(v / 1e6, 'g', 6); }
}  // namespace

MemoryCurve::MemoryCurve(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setMinimumSize(400, 300);
}

QRectF MemoryCurve::plotRect() const { return QRectF(80, 20, width() - 80 - 170, height() - 20 - 50); }

void MemoryCurve::resizeEvent(QResizeEvent*) {
    const QRectF plot = plotRect();
    m_axis.setViewport(plot.left(), plot.width());
    m_axis.reset();
}

void MemoryCurve::setPlan(std::shared_ptr<const PlanResult> plan) {
    m_plan = std::move(plan);
    m_axis.setSpan(m_plan->eval.timeline.step_ns);
    const QRectF plot = plotRect();
    m_axis.setViewport(plot.left(), plot.width());
    m_axis.reset();
    update();
}

int MemoryCurve::pointAt(int64_t time_ns) const {
    if (!m_plan) return -1;
    const auto& curve = m_plan->eval.timed.curve;
    auto it = std::upper_bound(curve.begin(), curve.end(), time_ns,
                               [](int64_t t, const core::MemoryPoint& p) { return t < p.time_ns; });
    return static_cast<int>(it - curve.begin()) - 1;
}

QString MemoryCurve::hoverText(int64_t time_ns) const {
    const int i = pointAt(time_ns);
    if (i < 0) return {};
    const core::MemoryPoint& pt = m_plan->eval.timed.curve[static_cast<size_t>(i)];
    QString s = QString("<b>t = %1</b>, total %2").arg(formatDurationNs(time_ns), formatGiB(core::total(pt.bytes)));
    if (pt.task >= 0) s += "<br>after " + QString::fromStdString(m_plan->eval.program.taskLabel(pt.task)).toHtmlEscaped();
    for (int c = core::kMemCategoryCount - 1; c >= 0; --c) {
        if (pt.bytes[static_cast<size_t>(c)] == 0) continue;
        s += "<br>" + toQString(core::categoryName(static_cast<core::MemCategory>(c))) + ": " +
             formatGiB(pt.bytes[static_cast<size_t>(c)]);
    }
    return s;
}

void MemoryCurve::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    if (!m_plan) return;
    const sim::Evaluation& e = m_plan->eval;
    const auto& curve = e.timed.curve;
    const QRectF plot = plotRect();
    const int64_t top = std::max(e.timed.peak_bytes, e.fit.capacity_bytes);
    LinearScale y{0, toGiB(top) * 1.05, plot.bottom(), plot.top()};
    LinearScale x{0, static_cast<double>(e.timeline.step_ns), plot.left(), plot.right()};
    drawAxes(p, plot, x, y, "time in the step (ms)", "memory per GPU (GiB)", msLabel, gibLabel);
    if (curve.empty()) return;
    p.save();
    p.setClipRect(plot);
    p.setRenderHint(QPainter::Antialiasing, false);
    // One stacked column per pixel, showing the highest total in effect during that pixel's time
    // range, so transient peaks (applied and undone at a task's midpoint) stay visible.
    const int x_begin = static_cast<int>(std::floor(plot.left()));
    const int x_end = static_cast<int>(std::ceil(plot.right()));
    size_t next = 0;
    int64_t prev_total = -1;
    const core::MemoryPoint* prev = nullptr;
    for (int px = x_begin; px < x_end; ++px) {
        const int64_t t_end = m_axis.toTime(px + 1);
        const core::MemoryPoint* best = prev;
        int64_t best_total = prev_total;
        while (next < curve.size() && curve[next].time_ns < t_end) {
            const int64_t tot = core::total(curve[next].bytes);
            if (tot > best_total || best == nullptr) {
                best = &curve[next];
                best_total = tot;
            }
            prev = &curve[next];
            prev_total = tot;
            ++next;
        }
        if (!best) continue;
        double base = 0;
        for (int c = 0; c < core::kMemCategoryCount; ++c) {
            const double v = toGiB(best->bytes[static_cast<size_t>(c)]);
            if (v <= 0) continue;
            p.fillRect(QRectF(QPointF(px, y.toPixel(base + v)), QPointF(px + 1, y.toPixel(base))),
                       categoryColor(static_cast<core::MemCategory>(c)));
            base += v;
        }
    }
    p.restore();
    // Capacity, budget and the peak.
    p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 2));
    p.drawLine(QPointF(plot.left(), y.toPixel(toGiB(e.fit.capacity_bytes))), QPointF(plot.right(), y.toPixel(toGiB(e.fit.capacity_bytes))));
    p.drawText(QPointF(plot.left() + 4, y.toPixel(toGiB(e.fit.capacity_bytes)) - 4), "capacity " + formatGiB(e.fit.capacity_bytes));
    const QPointF peak(m_axis.toPixel(e.timed.peak_time_ns), y.toPixel(toGiB(e.timed.peak_bytes)));
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(QPen(Qt::black, 2));
    p.setBrush(Qt::white);
    p.drawEllipse(peak, 5, 5);
    const QString label = "peak " + formatGiB(e.timed.peak_bytes) + " at " + formatDurationNs(e.timed.peak_time_ns);
    p.drawText(QPointF(std::min(peak.x() + 8, plot.right() - 220), peak.y() - 8), label);
    // Legend.
    double ly = plot.top();
    for (int c = core::kMemCategoryCount - 1; c >= 0; --c) {
        if (e.timed.max_per_category[static_cast<size_t>(c)] <= 0) continue;
        p.fillRect(QRectF(plot.right() + 12, ly + 2, 12, 12), categoryColor(static_cast<core::MemCategory>(c)));
        p.setPen(Qt::black);
        p.drawText(QPointF(plot.right() + 30, ly + 12), toQString(core::categoryName(static_cast<core::MemCategory>(c))));
        ly += 18;
    }
}

void MemoryCurve::mouseMoveEvent(QMouseEvent* e) {
    if (!m_plan || !plotRect().contains(e->position())) {
        QToolTip::hideText();
        return;
    }
    const QString text = hoverText(m_axis.toTime(e->position().x()));
    if (text.isEmpty()) {
        QToolTip::hideText();
    } else {
        QToolTip::showText(e->globalPosition().toPoint(), text, this);
    }
}

MemoryView::MemoryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QHBoxLayout(this);
    m_curve = new MemoryCurve;
    layout->addWidget(m_curve, 1);
    auto* side = new QVBoxLayout;
    side->addWidget(new QLabel("<b>Tasks running at the peak</b>"));
    m_alive = new QListWidget;
    m_alive->setMinimumWidth(260);
    m_alive->setMaximumWidth(360);
    side->addWidget(m_alive, 1);
    layout->addLayout(side);
}

void MemoryView::setPlan(std::shared_ptr<const PlanResult> plan) {
    m_curve->setPlan(plan);
    m_alive->clear();
    const sim::Evaluation& e = plan->eval;
    const int64_t t = e.timed.peak_time_ns;
    for (int32_t id = 0; id < e.program.size(); ++id) {
        const core::TaskTime& tt = e.timeline.tasks[static_cast<size_t>(id)];
        const bool alive = (tt.start_ns <= t && t < tt.end_ns) || id == e.timed.peak_task;
        if (!alive) continue;
        auto* item = new QListWidgetItem(QString("%1  [%2]  %3")
                                             .arg(QString::fromStdString(e.program.taskLabel(id)),
                                                  toQString(core::streamName(tt.stream)), formatDurationNs(tt.durationNs())));
        if (id == e.timed.peak_task) {
            QFont f = item->font();
            f.setBold(true);
            item->setFont(f);
            item->setToolTip("the task whose memory event reached the peak");
        }
        m_alive->addItem(item);
    }
}

}  // namespace shardcast::gui
