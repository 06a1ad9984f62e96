#pragma once
// Memory over the step: the timed memory curve stacked by category, the peak marked, the tasks
// running at the peak listed beside it; hovering shows the category sizes at that moment.
#include <memory>

#include <QWidget>

#include "gui/state/plan_results.hpp"
#include "gui/widgets/time_axis.hpp"

class QListWidget;

namespace shardcast::gui {

class MemoryCurve : public QWidget {
    Q_OBJECT
public:
    explicit MemoryCurve(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);
    // The curve point in effect at time t (the last at or before it); -1 before the first.
    int pointAt(int64_t time_ns) const;
    QString hoverText(int64_t time_ns) const;
    const TimeAxis& axis() const { return m_axis; }

protected:
    void paintEvent(QPaintEvent*) override;
    void resizeEvent(QResizeEvent*) override;
    void mouseMoveEvent(QMouseEvent* e) override;

private:
    QRectF plotRect() const;
    std::shared_ptr<const PlanResult> m_plan;
    TimeAxis m_axis;
};

class MemoryView : public QWidget {
    Q_OBJECT
public:
    explicit MemoryView(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);
    MemoryCurve* curve() const { return m_curve; }
    QListWidget* aliveList() const { return m_alive; }

private:
    MemoryCurve* m_curve = nullptr;
    QListWidget* m_alive = nullptr;
};

}  // namespace shardcast::gui
