#pragma once
// Predicted against measured memory over the step, on one time axis: the two totals of
// core::comparableMemoryCurves (a rise above the step's start where the run measured one), each
// drawn as the highest total in effect per pixel so transient peaks stay visible, with both peaks
// marked. Shown under the compare view's lanes.
#include <cstdint>

#include <QColor>
#include <QString>
#include <QWidget>

#include "core/results/run_record.hpp"

namespace shardcast::gui {

class MemoryOverlay : public QWidget {
    Q_OBJECT
public:
    explicit MemoryOverlay(QWidget* parent = nullptr);
    // `rise`: the curves are rises above the step's start (the y axis says so).
    void setCurves(core::MemoryCurves curves, int64_t predicted_step_ns, int64_t measured_step_ns, bool rise);
    const core::MemoryCurves& curves() const { return m_curves; }
    // The colours of the two curves (the legend's).
    static QColor predictedColour();
    static QColor measuredColour();

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    QRectF plotRect() const;
    core::MemoryCurves m_curves;
    int64_t m_span_ns = 0;
    int64_t m_predicted_step_ns = 0, m_measured_step_ns = 0;
    bool m_rise = false;
};

}  // namespace shardcast::gui
