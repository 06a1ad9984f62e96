#include "gui/widgets/export.hpp"

#include <QBuffer>
#include <QByteArray>
#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QSvgGenerator>
#include <QWidget>

#include <string_view>

#include "core/base/file_io.hpp"

namespace shardcast::gui {

// Rendered into memory, then written as every kept file is (core::writeFileAtomically), so an
// existing picture is never half-replaced and a write error names the file.
core::Status saveWidgetImage(QWidget* widget, const QString& path) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    QByteArray bytes;
    QBuffer buffer(&bytes);
    if (!buffer.open(QIODevice::WriteOnly)) return core::makeError(path.toStdString() + ": cannot render the view");
    if (suffix == "svg") {
        QSvgGenerator svg;
        svg.setOutputDevice(&buffer);
        svg.setSize(widget->size());
        svg.setViewBox(QRect(QPoint(0, 0), widget->size()));
        svg.setTitle("shardcast");
        QPainter painter;
        if (!painter.begin(&svg)) return core::makeError(path.toStdString() + ": cannot render the SVG");
        widget->render(&painter);
        painter.end();
    } else {
        QImage image(widget->size(), QImage::Format_ARGB32_Premultiplied);
        image.fill(Qt::white);
        {
            QPainter painter(&image);
            widget->render(&painter);
        }
        if (!image.save(&buffer, suffix.isEmpty() ? "PNG" : suffix.toUtf8().constData())) {
            return core::makeError(path.toStdString() + ": cannot write the image (unknown format '" +
                                   suffix.toStdString() + "'; use .png or .svg)");
        }
    }
    buffer.close();
    return core::writeFileAtomically(path.toStdString(),
                                      std::string_view(bytes.constData(), static_cast<size_t>(bytes.size())));
}

}  // namespace shardcast::gui
