#pragma once
// A custom-painted timeline: one lane per (timeline, stream) track, tasks as boxes, exposed
// communication hatched in red, and optionally a memory lane underneath on the same time axis.
// Zoom with the wheel or +/-, Ctrl+0 resets, pan by dragging or with the arrow keys; hovering a
// task shows its unit, kind, bytes, FLOPs, start and duration. The timeline view shows one
// prediction; the compare view shows a prediction and a measurement, lanes aligned.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <QString>
#include <QWidget>

#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "gui/widgets/time_axis.hpp"

namespace shardcast::gui {

struct TimelineTrack {
    QString label;
    const core::Timeline* timeline = nullptr;
    core::Stream stream = core::Stream::Compute;
    bool highlight_exposed = true;  // hatch the parts of collectives no compute overlaps
};

class TimelineCanvas : public QWidget {
    Q_OBJECT
public:
    explicit TimelineCanvas(QWidget* parent = nullptr);

    // `owner` keeps the program, timelines and memory alive; memory may be null (no memory lane).
    // `color` (may be empty: by task kind) colours task `id` of track `track`; `extra` adds a line to
    // a task's tooltip.
    void setData(std::shared_ptr<const void> owner, const core::Program* program, std::vector<TimelineTrack> tracks,
                 const core::TimedMemory* memory, std::function<QColor(int32_t id, int track)> color = {},
                 std::function<QString(int32_t id, int track)> extra = {});
    void clear();

    TimeAxis& axis() { return m_axis; }
    const TimeAxis& axis() const { return m_axis; }
    int trackCount() const { return static_cast<int>(m_tracks.size()); }
    QString trackLabel(int i) const { return m_tracks[static_cast<size_t>(i)].track.label; }
    int64_t spanNs() const { return m_axis.spanNs(); }
    // The task under a point ({-1, -1} when none): (task id, track index).
    std::pair<int32_t, int> taskAt(QPointF pos) const;
    QString taskTooltip(int32_t id, int track) const;
    QRectF taskRect(int32_t id, int track) const;

    static constexpr double kLabelWidth = 170;
    static constexpr double kRulerHeight = 24;
    static constexpr double kLaneHeight = 26;
    static constexpr double kMemoryLaneHeight = 110;

protected:
    void paintEvent(QPaintEvent*) override;
    void resizeEvent(QResizeEvent*) override;
    void wheelEvent(QWheelEvent* e) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void mouseReleaseEvent(QMouseEvent* e) override;
    void keyPressEvent(QKeyEvent* e) override;

private:
    struct Lane {
        TimelineTrack track;
        std::vector<int32_t> tasks;                          // on this stream, by start time
        std::vector<std::pair<int64_t, int64_t>> exposed;    // intervals no compute overlaps
    };
    double laneTop(int i) const { return kRulerHeight + i * kLaneHeight; }
    void updateViewport();
    void paintRuler(QPainter& p);
    void paintLane(QPainter& p, int i);
    void paintMemory(QPainter& p);

    std::shared_ptr<const void> m_owner;
    const core::Program* m_program = nullptr;
    std::vector<Lane> m_tracks;
    const core::TimedMemory* m_memory = nullptr;
    std::function<QColor(int32_t, int)> m_color;
    std::function<QString(int32_t, int)> m_extra;
    TimeAxis m_axis;
    std::optional<QPointF> m_drag_from;
};

}  // namespace shardcast::gui
