#pragma once
// Linear value <-> pixel scales and "nice" tick values for the custom-painted charts.
#include <vector>

#include <QRectF>
#include <QString>

class QPainter;

namespace shardcast::gui {

struct LinearScale {
    double v0 = 0, v1 = 1;    // value range
    double p0 = 0, p1 = 1;    // pixel range (p1 < p0 for a y axis)
    double toPixel(double v) const { return p0 + (v - v0) / (v1 - v0) * (p1 - p0); }
    double toValue(double p) const { return v0 + (p - p0) / (p1 - p0) * (v1 - v0); }
};

// About `count` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi].
std::vector<double> niceTicks(double lo, double hi, int count = 6);

// Draws the frame of `plot`, ticks and labels of both scales, and the axis titles; `label`
// formats a tick value.
void drawAxes(QPainter& p, const QRectF& plot, const LinearScale& x, const LinearScale& y, const QString& x_title,
              const QString& y_title, QString (*x_label)(double), QString (*y_label)(double));

}  // namespace shardcast::gui
