#include "gui/widgets/memory_overlay.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <QPainter>
#include <QPainterPath>

#include "gui/widgets/palette.hpp"
#include "gui/widgets/plot_axes.hpp"

namespace shardcast::gui {

namespace {

constexpr QColor kPredicted(0x1f, 0x77, 0xb4);
constexpr QColor kMeasured(0xe6, 0x7e, 0x22);

int64_t peakOf(const std::vector<core::TotalPoint>& c) {
    int64_t top = 0;
    for (const core::TotalPoint& p : c) top = std::max(top, p.bytes);
    return top;
}

// The y axis in MiB below 1 GiB, else in GiB.
bool useGiB(int64_t top) { return top >= (int64_t{1} << 30); }
QString valueLabel(double v) { return QString::number(v, 'g', 4); }
QString msLabel(double v) { return QString::number(v / 1e6, 'g', 6); }

}  // namespace

MemoryOverlay::MemoryOverlay(QWidget* parent) : QWidget(parent) { setMinimumSize(400, 220); }

void MemoryOverlay::setCurves(core::MemoryCurves curves, int64_t predicted_step_ns, int64_t measured_step_ns, bool rise) {
    m_curves = std::move(curves);
    m_span_ns = std::max<int64_t>({predicted_step_ns, measured_step_ns, 1});
    m_predicted_step_ns = predicted_step_ns;
    m_measured_step_ns = measured_step_ns;
    m_rise = rise;
    update();
}

QRectF MemoryOverlay::plotRect() const { return QRectF(80, 26, width() - 80 - 210, height() - 26 - 44); }

QColor MemoryOverlay::predictedColour() { return kPredicted; }
QColor MemoryOverlay::measuredColour() { return kMeasured; }

void MemoryOverlay::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    const QRectF plot = plotRect();
    const int64_t top = std::max({peakOf(m_curves.predicted), peakOf(m_curves.measured), int64_t{1} << 20});
    const double unit = useGiB(top) ? double(int64_t{1} << 30) : double(1 << 20);
    const LinearScale y{0, static_cast<double>(top) / unit * 1.08, plot.bottom(), plot.top()};
    const LinearScale x{0, static_cast<double>(m_span_ns), plot.left(), plot.right()};
    drawAxes(p, plot, x, y, "time in the step (ms)", useGiB(top) ? "memory (GiB)" : "memory (MiB)", msLabel, valueLabel);
    p.setPen(Qt::black);
    p.drawText(QPointF(plot.left(), plot.top() - 8),
               m_rise ? "Memory over the step, predicted and measured: the rise above the step's start (a CPU trace has no "
                        "absolute level)"
                      : "Memory over the step, predicted and measured");
    if (m_curves.predicted.empty() && m_curves.measured.empty()) {
        p.drawText(plot, Qt::AlignCenter, "no memory curve: the run measured no memory over its step");
        return;
    }
    p.setRenderHint(QPainter::Antialiasing);
    double legend_y = plot.top();
    for (const auto& [curve, colour, name, step_ns] :
         {std::tuple{&m_curves.predicted, kPredicted, QString("predicted"), m_predicted_step_ns},
          std::tuple{&m_curves.measured, kMeasured, QString("measured"), m_measured_step_ns}}) {
        if (curve->empty()) {
            p.setPen(Qt::black);
            p.drawText(QPointF(plot.right() + 12, legend_y + 9), name + ": no curve recorded");
            legend_y += 24;
            continue;
        }
        // Each curve runs to the end of its own step (the last value holds until then).
        const double end_px = x.toPixel(static_cast<double>(std::max(step_ns, curve->back().time_ns)));
        // One vertex per pixel column: the highest total in effect during it.
        QPainterPath path;
        bool started = false;
        size_t next = 0;
        int64_t current = -1;
        for (int px = static_cast<int>(std::floor(plot.left())); px < static_cast<int>(std::ceil(plot.right())); ++px) {
            const auto t_end = static_cast<int64_t>(std::floor(x.toValue(px + 1)));
            int64_t best = current;
            while (next < curve->size() && (*curve)[next].time_ns < t_end) {
                best = std::max(best, (*curve)[next].bytes);
                current = (*curve)[next].bytes;
                ++next;
            }
            if (best < 0) continue;
            const QPointF pt(px, y.toPixel(static_cast<double>(best) / unit));
            if (!started) {
                path.moveTo(pt);
                started = true;
            } else {
                path.lineTo(pt);
            }
            if (px + 1 > end_px) break;
        }
        p.setPen(QPen(colour, 2));
        p.setBrush(Qt::NoBrush);
        p.drawPath(path);
        // The peak: the first point reaching it.
        const auto peak = std::max_element(curve->begin(), curve->end(), [](auto a, auto b) { return a.bytes < b.bytes; });
        const QPointF at(x.toPixel(static_cast<double>(peak->time_ns)), y.toPixel(static_cast<double>(peak->bytes) / unit));
        p.setBrush(Qt::white);
        p.drawEllipse(at, 4, 4);
        p.fillRect(QRectF(plot.right() + 12, legend_y + 3, 14, 4), colour);
        p.setPen(Qt::black);
        p.drawText(QPointF(plot.right() + 32, legend_y + 9), name);
        p.drawText(QPointF(plot.right() + 32, legend_y + 24), "peak " + formatMemory(peak->bytes));
        p.drawText(QPointF(plot.right() + 32, legend_y + 39), "at " + formatDurationNs(peak->time_ns));
        legend_y += 56;
    }
}

}  // namespace shardcast::gui
