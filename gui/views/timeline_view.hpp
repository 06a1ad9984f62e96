#pragma once
// The timeline view: the current plan's simulated step, one lane per stream used, the memory lane
// underneath, a legend of task kinds.
#include <memory>

#include <QWidget>

#include "gui/state/plan_results.hpp"
#include "gui/widgets/timeline_canvas.hpp"

class QLabel;

namespace shardcast::gui {

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);
    TimelineCanvas* canvas() const { return m_canvas; }
    const PlanResult* plan() const { return m_plan.get(); }

private:
    TimelineCanvas* m_canvas = nullptr;
    QLabel* m_summary = nullptr;
    std::shared_ptr<const PlanResult> m_plan;
};

}  // namespace shardcast::gui
