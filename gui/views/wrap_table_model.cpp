#include "gui/views/wrap_table_model.hpp"

#include <QBrush>
#include <QColor>

#include "gui/widgets/palette.hpp"

namespace shardcast::gui {

WrapTableModel::WrapTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void WrapTableModel::setResult(std::shared_ptr<const WrapResult> result) {
    beginResetModel();
    m_result = std::move(result);
    m_on_front.assign(m_result ? m_result->sweep.size() : 0, false);
    if (m_result) {
        for (size_t i : m_result->front) m_on_front[i] = true;
    }
    endResetModel();
}

int WrapTableModel::rowCount(const QModelIndex& parent) const {
    if (parent.isValid() || !m_result) return 0;
    return static_cast<int>(m_result->sweep.size());
}

int WrapTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant WrapTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || !m_result || index.row() < 0 || index.row() >= rowCount()) return {};
    const sim::SweepResult& r = m_result->sweep[static_cast<size_t>(index.row())];
    const sim::SweepCandidate& c = r.candidate;
    if (role == kCandidateRole) return index.row();
    if (role == Qt::TextAlignmentRole) {
        return index.column() >= Units ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    }
    if (role == Qt::ForegroundRole) {
        if (!r.ok) return QBrush(Qt::gray);
        if (index.column() == Fits) return QBrush(r.fits ? QColor(0x1e, 0x84, 0x49) : QColor(0xc0, 0x39, 0x2b));
        return {};
    }
    if (role == Qt::ToolTipRole) return r.ok ? QString::fromStdString(sim::candidateLabel(c)) : QString::fromStdString(r.error);
    const bool sort = role == kSortRole;
    if (role != Qt::DisplayRole && !sort) return {};
    switch (static_cast<Column>(index.column())) {
        case Strategy: return toQString(core::strategyName(c.strategy));
        case Wrap: return toQString(core::wrapPolicyString(c.wrap));
        case Ac: return toQString(core::acString(c.ac));
        case Units: return r.ok ? QVariant(r.units) : QVariant();
        case Step:
            if (!r.ok) return sort ? QVariant(1e300) : QVariant("invalid");
            return sort ? QVariant(r.step_s) : QVariant(QString::number(r.step_s * 1e3, 'f', 2));
        case Peak:
            if (!r.ok) return sort ? QVariant(1e300) : QVariant();
            return sort ? QVariant(toGiB(r.peak_bytes)) : QVariant(QString::number(toGiB(r.peak_bytes), 'f', 2));
        case Exposed:
            if (!r.ok) return {};
            return sort ? QVariant(r.exposed_comm_s) : QVariant(QString::number(r.exposed_comm_s * 1e3, 'f', 2));
        case Mfu:
            if (!r.ok) return {};
            return sort ? QVariant(r.mfu) : QVariant(QString::number(r.mfu, 'f', 3));
        case Fits:
            if (!r.ok) return {};
            return sort ? QVariant(r.fits ? 1 : 0) : QVariant(r.fits ? "yes" : "no");
        case Front: {
            const bool on = m_on_front[static_cast<size_t>(index.row())];
            return sort ? QVariant(on ? 1 : 0) : QVariant(on ? "yes" : "");
        }
        case ColumnCount: break;
    }
    return {};
}

QVariant WrapTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
    if (orientation == Qt::Vertical) return section + 1;
    switch (static_cast<Column>(section)) {
        case Strategy: return "strategy";
        case Wrap: return "wrap";
        case Ac: return "AC";
        case Units: return "units";
        case Step: return "step (ms)";
        case Peak: return "peak (GiB)";
        case Exposed: return "exposed comm (ms)";
        case Mfu: return "MFU";
        case Fits: return "fits";
        case Front: return "Pareto";
        case ColumnCount: break;
    }
    return {};
}

}  // namespace shardcast::gui
