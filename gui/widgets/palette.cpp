#include "gui/widgets/palette.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include <QHeaderView>
#include <QScrollArea>
#include <QTableView>

namespace shardcast::gui {

QColor categoryColor(core::MemCategory c) {
    // Index order of core::MemCategory; light to dark by how long the bytes live.
    static const std::array<QColor, core::kMemCategoryCount> kColors = {
        QColor(0x4e, 0x79, 0xa7),  // Sharded Param
        QColor(0xa0, 0xcb, 0xe8),  // Unsharded Param
        QColor(0x9c, 0x75, 0x5f),  // Buffer
        QColor(0x59, 0xa1, 0x4f),  // Sharded Grad
        QColor(0x8c, 0xd1, 0x7d),  // Unsharded Grad
        QColor(0xf2, 0x8e, 0x2b),  // Activation
        QColor(0xff, 0xbe, 0x7d),  // Temp
        QColor(0xb0, 0x7a, 0xa1),  // All Gather
        QColor(0xd4, 0xa6, 0xc8),  // Reduce Scatter
        QColor(0xe1, 0x57, 0x59),  // Opt State
        QColor(0xed, 0xc9, 0x48),  // Inputs
        QColor(0x79, 0x70, 0x6e),  // Runtime Overhead
    };
    return kColors[static_cast<size_t>(core::index(c))];
}

QColor taskKindColor(core::TaskKind k) {
    using K = core::TaskKind;
    switch (k) {
        case K::Forward: return QColor(0x4e, 0x79, 0xa7);
        case K::Backward: return QColor(0x59, 0xa1, 0x4f);
        case K::Recompute: return QColor(0x76, 0xb7, 0xb2);
        case K::CopyIn: return QColor(0xba, 0xb0, 0xac);
        case K::AllGather: return QColor(0xb0, 0x7a, 0xa1);
        case K::CopyOut: return QColor(0x9d, 0x95, 0x91);
        case K::ReduceScatter: return QColor(0xf2, 0x8e, 0x2b);
        case K::AllReduce: return QColor(0xed, 0xc9, 0x48);
        case K::HostToDevice: return QColor(0x9c, 0x75, 0x5f);
        case K::DeviceToHost: return QColor(0xc4, 0x9c, 0x84);
        case K::Cast: return QColor(0xd3, 0xd3, 0xd3);
        case K::OptimizerStep: return QColor(0xe1, 0x57, 0x59);
        case K::Send: return QColor(0x8c, 0x6b, 0xb1);
        case K::Recv: return QColor(0x6a, 0x51, 0xa3);
        case K::ClipGrad: return QColor(0xff, 0x9d, 0x9a);
    }
    return Qt::gray;
}

QColor errorColor(double relative_error) {
    const double x = std::clamp(relative_error / 0.5, -1.0, 1.0);
    const QColor mid(0xc8, 0xc8, 0xc8);
    const QColor end = x < 0 ? QColor(0x21, 0x66, 0xac) : QColor(0xb2, 0x18, 0x2b);
    const double a = std::abs(x);
    return QColor::fromRgbF(static_cast<float>(mid.redF() + (end.redF() - mid.redF()) * a),
                            static_cast<float>(mid.greenF() + (end.greenF() - mid.greenF()) * a),
                            static_cast<float>(mid.blueF() + (end.blueF() - mid.blueF()) * a));
}

QString toQString(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

double toGiB(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(core::kGiB); }

QScrollArea* scrollable(QWidget* content) {
    auto* area = new QScrollArea;
    area->setWidget(content);
    area->setWidgetResizable(true);
    area->setFrameShape(QFrame::NoFrame);
    return area;
}

QTableView* sortableTable(QAbstractItemModel* proxy, int column, Qt::SortOrder order) {
    auto* table = new QTableView;
    table->setModel(proxy);
    table->setSortingEnabled(true);
    table->sortByColumn(column, order);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setSelectionMode(QAbstractItemView::SingleSelection);
    table->verticalHeader()->hide();
    table->verticalHeader()->setDefaultSectionSize(table->fontMetrics().height() + 6);
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    return table;
}

QString formatGiB(int64_t bytes) {
    return QString::number(static_cast<double>(bytes) / static_cast<double>(core::kGiB), 'f', 2) + " GiB";
}

QString formatMemory(int64_t bytes) {
    if (std::llabs(bytes) >= core::kGiB) return formatGiB(bytes);
    return QString::number(static_cast<double>(bytes) / static_cast<double>(core::kGiB >> 10), 'f', 2) + " MiB";
}

QString formatMs(double seconds) { return QString::number(seconds * 1e3, 'f', 2) + " ms"; }

QString formatDurationNs(int64_t ns) {
    const double v = static_cast<double>(ns);
    if (std::abs(v) < 1e3) return QString::number(ns) + " ns";
    if (std::abs(v) < 1e6) return QString::number(v / 1e3, 'f', 1) + " us";
    if (std::abs(v) < 1e9) return QString::number(v / 1e6, 'f', 3) + " ms";
    return QString::number(v / 1e9, 'f', 3) + " s";
}

QString formatFlops(int64_t flops) {
    const double v = static_cast<double>(flops);
    if (v >= 1e12) return QString::number(v / 1e12, 'f', 2) + " TFLOP";
    if (v >= 1e9) return QString::number(v / 1e9, 'f', 2) + " GFLOP";
    if (v >= 1e6) return QString::number(v / 1e6, 'f', 2) + " MFLOP";
    return QString::number(flops) + " FLOP";
}

}  // namespace shardcast::gui
