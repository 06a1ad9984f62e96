#pragma once
// The fit view: the headline (fits or not, peak vs capacity, step time, MFU, tokens/s per GPU)
// and the peak memory of all five strategies as stacked bars by category against the capacity
// and budget lines; clicking a bar asks for that strategy.
#include <memory>
#include <vector>

#include <QRectF>
#include <QWidget>

#include "core/plan/sharding.hpp"
#include "gui/state/plan_results.hpp"

class QLabel;

namespace shardcast::gui {

class StrategyBars : public QWidget {
    Q_OBJECT
public:
    explicit StrategyBars(QWidget* parent = nullptr);
    void setComparison(std::shared_ptr<const StrategyComparison> c, core::Strategy current);
    // The bar under `pos` in widget coordinates (-1: none), index into the comparison.
    int barAt(QPointF pos) const;
    QRectF barRect(int index) const;  // the bar's whole column (valid after a paint or resize)

signals:
    void strategyClicked(core::Strategy strategy);

protected:
    void paintEvent(QPaintEvent*) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;

private:
    QRectF plotRect() const;
    std::shared_ptr<const StrategyComparison> m_data;
    core::Strategy m_current = core::Strategy::FullShard;
};

class FitView : public QWidget {
    Q_OBJECT
public:
    explicit FitView(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);
    void setStrategies(std::shared_ptr<const StrategyComparison> c);
    QString headlineText() const;  // plain text of the headline, for tests
    StrategyBars* bars() const { return m_bars; }

signals:
    void strategyClicked(core::Strategy strategy);

private:
    QLabel* m_headline = nullptr;
    QLabel* m_details = nullptr;
    StrategyBars* m_bars = nullptr;
    std::shared_ptr<const PlanResult> m_plan;
};

}  // namespace shardcast::gui
