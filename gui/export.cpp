#include "gui/export.hpp"

#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>

namespace shardcast::gui {

core::Status saveWidgetImage(QWidget* widget, const QString& path) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix == "svg") {
        QSvgGenerator svg;
        svg.setFileName(path);
        svg.setSize(widget->size());
        svg.setViewBox(QRect(QPoint(0, 0), widget->size()));
        svg.setTitle("shardcast");
        QPainter painter;
        if (!painter.begin(&svg)) return core::makeError(path.toStdString() + ": cannot write the SVG file");
        widget->render(&painter);
        painter.end();
        return core::Ok{};
    }
    QImage image(widget->size(), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    {
        QPainter painter(&image);
        widget->render(&painter);
    }
    // Written to a temporary file and renamed, so an existing picture is never half-replaced.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || !image.save(&file, suffix.isEmpty() ? "PNG" : suffix.toUtf8().constData()) ||
        !file.commit()) {
        return core::makeError(path.toStdString() + ": cannot write the image (" +
                               (file.errorString().isEmpty() ? std::string("unknown format '") + suffix.toStdString() + "'"
                                                             : file.errorString().toStdString()) +
                               ")");
    }
    return core::Ok{};
}

}  // namespace shardcast::gui
