#pragma once
// Colours, number formatting and small widget helpers shared by every view: one colour per memory
// category and per task kind, defined here only.
#include <cstdint>
#include <string_view>

#include <QColor>
#include <QString>

#include "core/base/units.hpp"
#include "core/program/program.hpp"

class QAbstractItemModel;
class QScrollArea;
class QTableView;
class QWidget;

namespace shardcast::gui {

QColor categoryColor(core::MemCategory c);
QColor taskKindColor(core::TaskKind k);
// A signed relative error on a diverging scale: blue (prediction too small/fast) through grey
// (0) to red (too large/slow), saturating at +-50%.
QColor errorColor(double relative_error);

QString toQString(std::string_view s);  // UTF-8
double toGiB(int64_t bytes);            // bytes / 2^30, for chart scales

QString formatGiB(int64_t bytes);      // "12.34 GiB"
QString formatMemory(int64_t bytes);   // "12.34 GiB" from 1 GiB, else "35.97 MiB" (host runs)
QString formatMs(double seconds);      // "123.45 ms"
QString formatDurationNs(int64_t ns);  // picks ns / us / ms / s
QString formatFlops(int64_t flops);    // "1.23 TFLOP"

// `content` in a frameless scroll area that resizes it: a view keeps its minimum size and scrolls
// when the window is smaller, instead of widening the window.
QScrollArea* scrollable(QWidget* content);
// A compact table over `proxy`, sortable by clicking a header, one row selected at a time, sorted
// by `column` to start with.
QTableView* sortableTable(QAbstractItemModel* proxy, int column, Qt::SortOrder order);

}  // namespace shardcast::gui
