#pragma once
// The sweep's candidates as a table (one row per candidate, candidate order). Display strings
// carry units in the headers; kSortRole gives numbers so a proxy sorts numerically.
#include <memory>

#include <QAbstractTableModel>

#include "gui/state/plan_results.hpp"

namespace shardcast::gui {

class WrapTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Strategy, Wrap, Ac, Units, Step, Peak, Exposed, Mfu, Fits, Front, ColumnCount };
    static constexpr int kSortRole = Qt::UserRole;        // numbers for numeric columns
    static constexpr int kCandidateRole = Qt::UserRole + 1;  // the row's index into WrapResult::sweep

    explicit WrapTableModel(QObject* parent = nullptr);
    void setResult(std::shared_ptr<const WrapResult> result);
    const WrapResult* result() const { return m_result.get(); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    std::shared_ptr<const WrapResult> m_result;
    std::vector<bool> m_on_front;
};

}  // namespace shardcast::gui
