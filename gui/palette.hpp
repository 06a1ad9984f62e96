#pragma once
// Colours and number formatting shared by every view: one colour per memory category and per
// task kind, defined here only.
#include <cstdint>

#include <QColor>
#include <QString>

#include "core/program.hpp"
#include "core/units.hpp"

namespace shardcast::gui {

QColor categoryColor(core::MemCategory c);
QColor taskKindColor(core::TaskKind k);
// A signed relative error on a diverging scale: blue (prediction too small/fast) through grey
// (0) to red (too large/slow), saturating at +-50%.
QColor errorColor(double relative_error);

QString formatGiB(int64_t bytes);      // "12.34 GiB"
QString formatMs(double seconds);      // "123.45 ms"
QString formatDurationNs(int64_t ns);  // picks ns / us / ms / s
QString formatFlops(int64_t flops);    // "1.23 TFLOP"

}  // namespace shardcast::gui
