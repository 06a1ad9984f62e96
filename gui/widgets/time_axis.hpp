#pragma once
// The time <-> pixel mapping of the timeline and memory views: a plain class, tested without a
// display (as KDAB Hotspot does). Time is int64_t nanoseconds from the step's start; pixels are
// doubles in the widget's coordinates.
#include <cstdint>

namespace shardcast::gui {

class TimeAxis {
public:
    // The whole extent [0, span_ns] is shown across [left_px, left_px + width_px] after reset().
    void setSpan(int64_t span_ns);
    void setViewport(double left_px, double width_px);
    void reset();  // fit the whole span

    double toPixel(int64_t time_ns) const;
    int64_t toTime(double px) const;

    // Multiplies the magnification by `factor` (> 1 zooms in) keeping the time under `px` at `px`.
    // Zooming out stops at the whole span; zooming in at kMinNsPerPixel.
    void zoomAround(double px, double factor);
    void panPixels(double dx_px);  // positive dx moves the content right (earlier times come into view)

    double nsPerPixel() const { return m_ns_per_px; }
    double startNs() const { return m_start_ns; }  // time at left_px
    int64_t spanNs() const { return m_span_ns; }
    double leftPx() const { return m_left_px; }
    double widthPx() const { return m_width_px; }
    bool isReset() const;

    static constexpr double kMinNsPerPixel = 0.01;

private:
    double fitNsPerPixel() const;

    int64_t m_span_ns = 1;
    double m_left_px = 0;
    double m_width_px = 1;
    double m_ns_per_px = 1;
    double m_start_ns = 0;
};

}  // namespace shardcast::gui
