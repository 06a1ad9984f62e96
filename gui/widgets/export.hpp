#pragma once
// Rendering a widget to a file without a display: PNG (any raster format Qt writes, by suffix)
// or SVG (QSvgGenerator) when the name ends in .svg. Used by --screenshot and File > Export.
#include <QString>

#include "core/base/result.hpp"

class QWidget;

namespace shardcast::gui {

core::Status saveWidgetImage(QWidget* widget, const QString& path);

}  // namespace shardcast::gui
