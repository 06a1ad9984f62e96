#include "gui/widgets/time_axis.hpp"

#include <algorithm>
#include <cmath>

namespace shardcast::gui {

void TimeAxis::setSpan(int64_t span_ns) {
    m_span_ns = std::max<int64_t>(span_ns, 1);
    reset();
}

void TimeAxis::setViewport(double left_px, double width_px) {
    const bool was_reset = isReset();
    m_left_px = left_px;
    m_width_px = std::max(width_px, 1.0);
    if (was_reset) reset();
    m_ns_per_px = std::min(m_ns_per_px, fitNsPerPixel());
}

double TimeAxis::fitNsPerPixel() const { return static_cast<double>(m_span_ns) / m_width_px; }

void TimeAxis::reset() {
    m_ns_per_px = fitNsPerPixel();
    m_start_ns = 0;
}

bool TimeAxis::isReset() const { return m_start_ns == 0 && m_ns_per_px == fitNsPerPixel(); }

double TimeAxis::toPixel(int64_t time_ns) const {
    return m_left_px + (static_cast<double>(time_ns) - m_start_ns) / m_ns_per_px;
}

int64_t TimeAxis::toTime(double px) const {
    return static_cast<int64_t>(std::llround(m_start_ns + (px - m_left_px) * m_ns_per_px));
}

void TimeAxis::zoomAround(double px, double factor) {
    if (!(factor > 0)) return;
    const double anchor_ns = m_start_ns + (px - m_left_px) * m_ns_per_px;
    m_ns_per_px = std::clamp(m_ns_per_px / factor, kMinNsPerPixel, fitNsPerPixel());
    m_start_ns = anchor_ns - (px - m_left_px) * m_ns_per_px;
}

void TimeAxis::panPixels(double dx_px) { m_start_ns -= dx_px * m_ns_per_px; }

}  // namespace shardcast::gui
