#pragma once
// The wrap-granularity view: every sweep candidate (wrap policy x strategy x AC none/full) as a
// point of step time against peak memory, the Pareto front, the capacity line; a sortable table
// beside it; a click on a point or a row loads that plan. Below: the exact search's grouping and
// its PyTorch code with a Copy button; and `shardcast optimize` on the current inputs (the whole
// space: strategy, mesh, wrap, AC, micro-batch x accumulation, reshard, prefetch, offload) with a
// button that loads its winner.
#include <cstdint>
#include <memory>
#include <vector>

#include <QWidget>

#include "gui/state/plan_results.hpp"

class QLabel;
class QPushButton;
class QPlainTextEdit;
class QSortFilterProxyModel;
class QTableView;

namespace shardcast::gui {

class WrapTableModel;

class WrapScatter : public QWidget {
    Q_OBJECT
public:
    explicit WrapScatter(QWidget* parent = nullptr);
    void setResult(std::shared_ptr<const WrapResult> result);
    void setSelected(int candidate);
    // The candidate drawn nearest `pos` within a few pixels (-1: none).
    int candidateAt(QPointF pos) const;
    QPointF pointOf(int candidate) const;

signals:
    void candidateClicked(int candidate);

protected:
    void paintEvent(QPaintEvent*) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;

private:
    QRectF plotRect() const;
    std::shared_ptr<const WrapResult> m_result;
    int m_selected = -1;
    double m_x_max = 1, m_y_max = 1;  // ms, GiB
};

// The exact search's grouping drawn over the model's blocks: one cell per block, units as
// alternating colour runs labelled with their block range.
class GroupingStrip : public QWidget {
    Q_OBJECT
public:
    explicit GroupingStrip(QWidget* parent = nullptr);
    void setGrouping(int blocks, std::vector<int32_t> ends);

protected:
    void paintEvent(QPaintEvent*) override;

private:
    int m_blocks = 0;
    std::vector<int32_t> m_ends;
};

class WrapView : public QWidget {
    Q_OBJECT
public:
    explicit WrapView(QWidget* parent = nullptr);
    void setResult(std::shared_ptr<const WrapResult> result);
    void setPending();  // the plan changed: the sweep shown is being recomputed
    QString pytorchCode() const;
    // The optimizer's state: running, its result, or why it failed.
    void setOptimizeRunning();
    void setOptimizeResult(std::shared_ptr<const OptimizeRun> run);
    void setOptimizeError(const QString& message);
    QString optimizeText() const;
    WrapTableModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    WrapScatter* scatter() const { return m_scatter; }

signals:
    void candidateChosen(const sim::SweepCandidate& candidate);
    void optimizeRequested();
    void loadWinnerRequested();

private:
    void choose(int candidate);

    WrapScatter* m_scatter = nullptr;
    WrapTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QTableView* m_table = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_search = nullptr;
    GroupingStrip* m_strip = nullptr;
    QPlainTextEdit* m_code = nullptr;
    QLabel* m_optimize = nullptr;
    QPushButton* m_optimize_button = nullptr;
    QPushButton* m_load_winner = nullptr;
    std::shared_ptr<const WrapResult> m_result;
};

}  // namespace shardcast::gui
