#include "gui/widgets/plot_axes.hpp"

#include <cmath>

#include <QFontMetrics>
#include <QPainter>

namespace shardcast::gui {

std::vector<double> niceTicks(double lo, double hi, int count) {
    std::vector<double> ticks;
    if (!(hi > lo) || count < 1) return ticks;
    const double raw = (hi - lo) / count;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
        step = m * mag;
        if (step >= raw) break;
    }
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    return ticks;
}

void drawAxes(QPainter& p, const QRectF& plot, const LinearScale& x, const LinearScale& y, const QString& x_title,
              const QString& y_title, QString (*x_label)(double), QString (*y_label)(double)) {
    p.save();
    const QFontMetrics fm(p.font());
    p.setPen(QColor(0xe6, 0xe6, 0xe6));
    const auto yt = niceTicks(std::min(y.v0, y.v1), std::max(y.v0, y.v1));
    for (double v : yt) p.drawLine(QPointF(plot.left(), y.toPixel(v)), QPointF(plot.right(), y.toPixel(v)));
    p.setPen(Qt::black);
    p.drawRect(plot);
    for (double v : yt) {
        const double py = y.toPixel(v);
        p.drawLine(QPointF(plot.left() - 4, py), QPointF(plot.left(), py));
        const QString t = y_label(v);
        p.drawText(QRectF(plot.left() - 6 - fm.horizontalAdvance(t), py - fm.height() / 2.0, fm.horizontalAdvance(t),
                          fm.height()),
                   Qt::AlignRight | Qt::AlignVCenter, t);
    }
    if (x_label) {
        for (double v : niceTicks(std::min(x.v0, x.v1), std::max(x.v0, x.v1))) {
            const double px = x.toPixel(v);
            p.drawLine(QPointF(px, plot.bottom()), QPointF(px, plot.bottom() + 4));
            const QString t = x_label(v);
            const double w = fm.horizontalAdvance(t);
            p.drawText(QRectF(px - w / 2, plot.bottom() + 5, w, fm.height()), Qt::AlignCenter, t);
        }
    }
    if (!x_title.isEmpty()) {
        p.drawText(QRectF(plot.left(), plot.bottom() + 6 + fm.height(), plot.width(), fm.height()), Qt::AlignCenter,
                   x_title);
    }
    if (!y_title.isEmpty()) {
        p.translate(plot.left() - 56, plot.center().y());
        p.rotate(-90);
        p.drawText(QRectF(-plot.height() / 2, -fm.height(), plot.height(), fm.height()), Qt::AlignCenter, y_title);
    }
    p.restore();
}

}  // namespace shardcast::gui
